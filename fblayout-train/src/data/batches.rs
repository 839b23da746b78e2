//! Drawing examples in batches: each epoch visits every example once, in an order shuffled
//! from the run's seed and the epoch's number, so a position (epoch, index) is all a
//! checkpoint needs to continue the same sequence of batches.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// Shuffles `items` by the order of `seed` and `epoch` (ChaCha8 seeded from both).
pub(crate) fn shuffle<T>(items: &mut [T], seed: u64, epoch: u64) {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&epoch.to_le_bytes());
    items.shuffle(&mut ChaCha8Rng::from_seed(key));
}

/// Where the next batch starts: the epoch and the index in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataPosition {
    /// The epoch, from 0.
    pub epoch: u64,
    /// The index of the next example in the epoch's order.
    pub next: usize,
}

/// Batches of example indices over `len` examples (see the module docs); a batch that runs
/// past an epoch's end continues in the next epoch's order.
#[derive(Debug, Clone)]
pub struct Batches {
    len: usize,
    seed: u64,
    shuffled: bool,
    position: DataPosition,
    order: Vec<usize>,
}

impl Batches {
    /// Batches over `len > 0` examples, shuffled from `seed` (in file order where `shuffled`
    /// is false), starting at `position`.
    pub fn new(len: usize, seed: u64, shuffled: bool, position: DataPosition) -> Self {
        let mut b = Self {
            len,
            seed,
            shuffled,
            position,
            order: Vec::new(),
        };
        b.order = b.epoch_order(position.epoch);
        b
    }

    fn epoch_order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffled {
            shuffle(&mut order, self.seed, epoch);
        }
        order
    }

    /// Where the next batch starts.
    pub fn position(&self) -> DataPosition {
        self.position
    }

    /// The indices of the next `batch` examples.
    pub fn next_batch(&mut self, batch: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(batch);
        while out.len() < batch && self.len > 0 {
            if self.position.next >= self.len {
                self.position = DataPosition {
                    epoch: self.position.epoch + 1,
                    next: 0,
                };
                self.order = self.epoch_order(self.position.epoch);
            }
            out.push(self.order[self.position.next]);
            self.position.next += 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_epoch_visits_each_example_once_and_a_position_resumes_the_sequence() {
        let mut b = Batches::new(5, 3, true, DataPosition::default());
        let drawn: Vec<usize> = (0..5).flat_map(|_| b.next_batch(2)).collect();
        for epoch in drawn.chunks(5) {
            let mut e = epoch.to_vec();
            e.sort_unstable();
            assert_eq!(e, [0, 1, 2, 3, 4]);
        }
        assert_ne!(drawn[..5], drawn[5..10], "epochs are shuffled apart");
        let mut first = Batches::new(5, 3, true, DataPosition::default());
        first.next_batch(2);
        first.next_batch(2);
        let mut resumed = Batches::new(5, 3, true, first.position());
        assert_eq!(resumed.position(), DataPosition { epoch: 0, next: 4 });
        let rest: Vec<usize> = (0..3).flat_map(|_| resumed.next_batch(2)).collect();
        assert_eq!(rest, drawn[4..10]);
        let mut plain = Batches::new(3, 3, false, DataPosition::default());
        assert_eq!(plain.next_batch(4), [0, 1, 2, 0]);
    }
}
