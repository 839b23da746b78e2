//! Work spread over the host's cores: compiling many shaders and pipelines at once, where a
//! driver would otherwise compile one after another on the calling thread.

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f` of every item, in order, computed on as many threads as the host has cores (at most
/// one per item; on the calling thread where that is one). The first error in the items'
/// order is returned; a panic in `f` is resumed on the calling thread.
pub(crate) fn try_map<T: Sync, R: Send, E: Send>(
    items: &[T],
    f: impl Fn(&T) -> Result<R, E> + Sync,
) -> Result<Vec<R>, E> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut done: Vec<(usize, Result<R, E>)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return mine;
                        };
                        mine.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::try_map;

    #[test]
    fn results_keep_the_items_order_and_the_first_error_wins() {
        let items: Vec<u32> = (0..1000).collect();
        let squares = try_map(&items, |&x| Ok::<_, String>(u64::from(x) * u64::from(x))).unwrap();
        assert_eq!(squares.len(), 1000);
        assert!(
            squares
                .iter()
                .enumerate()
                .all(|(i, &s)| s == (i * i) as u64)
        );
        let err = try_map(&items, |&x| {
            if x % 300 == 299 {
                Err(format!("item {x}"))
            } else {
                Ok(x)
            }
        })
        .unwrap_err();
        assert_eq!(err, "item 299");
        let none: Vec<u32> = Vec::new();
        assert!(try_map(&none, |&x| Ok::<_, ()>(x)).unwrap().is_empty());
    }
}
