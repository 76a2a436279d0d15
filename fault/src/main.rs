//! Placeholder: the fault and abuse harness (issue 4).

fn main() {}
