//! Plans cached per shape: a second batch of a shape already seen reuses its plans (nothing is
//! planned again, the very same plans come back), which are the plans made from scratch for
//! that shape and run to the same loss; sequence lengths bucketed to powers of two share a
//! plan; bad shapes are errors that say why.

use fblayout_plan::exec::{AdamWConfig, CpuStep, StepInputs};
use fblayout_plan::graph::Sizes;
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::{Model, ModelConfig, build};
use fblayout_plan::select::{Buckets, CacheError, CostModel, PlanCache, Planned, Strategy, plan};

const TINY: ModelConfig = ModelConfig::new(50, 16, 2)
    .with_max_positions(16)
    .with_ffn(32)
    .with_layers(1);

fn cache(buckets: Buckets) -> PlanCache {
    let g = build(Model::Decoder, TINY).unwrap();
    PlanCache::new(g, CostModel::analytic(), Strategy::Guided)
        .with_buckets(buckets)
        .with_memory(MemoryOptions::default().keeping(["head.lin"]))
}

/// The loss of a forward-only step under `planned` (parameters of seed 3, inputs of seed 9).
fn loss(planned: &Planned) -> f64 {
    let (p, sizes) = (planned.plan(), planned.sizes());
    let adamw = AdamWConfig::default();
    let mut step = CpuStep::new(p.graph(), p.layouts(), planned.memory(), sizes, adamw).unwrap();
    step.init_params(3).unwrap();
    step.evaluate(&StepInputs::random(TINY.vocab, sizes, 9))
        .unwrap()
}

#[test]
fn a_second_batch_of_a_seen_shape_reuses_its_plans() {
    let mut cache = cache(Buckets::Exact);
    let sizes = Sizes { batch: 2, seq: 7 };
    let first: *const Planned = cache.get(sizes).unwrap();
    assert_eq!(cache.plans_made(), 1);
    let other = Sizes { batch: 2, seq: 5 };
    assert_eq!(cache.get(other).unwrap().sizes(), other);
    assert_eq!(cache.plans_made(), 2);
    let again: *const Planned = cache.get(sizes).unwrap();
    assert_eq!(cache.plans_made(), 2, "the seen shape was planned again");
    assert!(
        std::ptr::eq(first, again),
        "the seen shape's plans are not the same ones"
    );

    // The reused plans are the plans made from scratch for that shape.
    let planned = cache.get(sizes).unwrap();
    let g = build(Model::Decoder, TINY).unwrap();
    let fresh = plan(&g, sizes, &CostModel::analytic(), Strategy::Guided).unwrap();
    assert_eq!(planned.plan().graph(), fresh.graph());
    assert_eq!(planned.plan().layouts(), fresh.layouts());
    let options = MemoryOptions::default().keeping(["head.lin"]);
    let memory = plan_memory(fresh.graph(), fresh.layouts(), sizes, options).unwrap();
    assert_eq!(planned.memory(), &memory);
    let mut step = CpuStep::new(
        fresh.graph(),
        fresh.layouts(),
        &memory,
        sizes,
        AdamWConfig::default(),
    )
    .unwrap();
    step.init_params(3).unwrap();
    let want = step
        .evaluate(&StepInputs::random(TINY.vocab, sizes, 9))
        .unwrap();
    assert_eq!(loss(planned), want);
}

#[test]
fn sequence_lengths_bucketed_to_powers_of_two_share_a_plan() {
    let mut cache = cache(Buckets::PowersOfTwo { max_seq: 16 });
    for (seq, bucket) in [(3, 4), (4, 4), (5, 8), (8, 8), (1, 1), (9, 16), (16, 16)] {
        let planned = cache.get(Sizes { batch: 2, seq }).unwrap();
        assert_eq!(
            planned.sizes(),
            Sizes {
                batch: 2,
                seq: bucket
            },
            "seq {seq}"
        );
    }
    assert_eq!(cache.plans_made(), 4, "buckets 1, 4, 8 and 16");
    // Another batch size is another shape.
    cache.get(Sizes { batch: 3, seq: 4 }).unwrap();
    assert_eq!(cache.plans_made(), 5);
}

#[test]
fn a_shape_past_the_buckets_or_empty_is_an_error_saying_so() {
    let mut cache = cache(Buckets::PowersOfTwo { max_seq: 16 });
    let err = cache.get(Sizes { batch: 2, seq: 17 }).unwrap_err();
    assert!(
        matches!(err, CacheError::TooLong { max_seq: 16, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("seq 17"), "{err}");
    let err = cache.get(Sizes { batch: 0, seq: 4 }).unwrap_err();
    assert!(matches!(err, CacheError::Empty(_)), "{err}");
    assert!(err.to_string().contains("nothing to plan"), "{err}");
    let mut keeping = cache.with_memory(MemoryOptions::default().keeping(["nope"]));
    let err = keeping.get(Sizes { batch: 2, seq: 4 }).unwrap_err();
    assert!(err.to_string().contains("`nope`"), "{err}");
    assert_eq!(keeping.plans_made(), 0);
}
