//! Deterministic pseudo-randomness for the harness: every choice a check
//! makes (which command, which thread, when to kill) comes from one seed, so
//! a failing run can be replayed with `--seed`. SplitMix64: small, fast and
//! good enough to spread choices; it must never be used for anything secret.

/// A seeded pseudo-random stream (SplitMix64).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A stream determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// An index into a collection of `len` items (0 when it is empty).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`, or `None` when there are none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            None
        } else {
            items.get(self.index(items.len()))
        }
    }

    /// An index chosen with the given weights (0 when they are all 0).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut ticket = self.below(total);
        for (i, &weight) in weights.iter().enumerate() {
            if ticket < weight {
                return i;
            }
            ticket -= weight;
        }
        0
    }

    /// An independent stream for a worker, derived from this one.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

/// A seed for a run that was not given one: different on every run, and
/// printed by the harness so that the run can be replayed.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut rng = Rng::new((nanos as u64) ^ u64::from(std::process::id()).rotate_left(32));
    rng.next_u64() % 1_000_000_000
}
