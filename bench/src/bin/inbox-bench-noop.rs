//! The process-spawn floor: a program that does nothing, built in the same
//! release profile as `inbox`, so that a CLI command's cost can be read as a
//! multiple of what starting any process costs here. It must stay empty.

fn main() {}
