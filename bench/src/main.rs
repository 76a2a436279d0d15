//! Placeholder: the benchmark harness (issue 4).

fn main() {}
