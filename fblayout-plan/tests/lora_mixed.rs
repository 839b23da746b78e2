//! LoRA in mixed precision. Frozen base weights stay `f32`, and so do the gradients a kernel
//! writes of them anyway (a normalisation's scale and shift); the adapters' `A` and `B`, read
//! transposed, get `f16` copies that their AdamW steps write, so the adapters' products
//! multiply `f16` factors, the last of them writing the adapter's sum with its base layer's
//! output; the GPU step of a LoRA graph in mixed precision runs, and its first loss agrees with
//! the CPU executor's `f64` step of the same graph in `f32`.

mod exec_support;

use fblayout_core::layout::ElemType;
use fblayout_plan::exec::{AdamWConfig, CpuStep, GpuStep, StepInputs};
use fblayout_plan::graph::optimizer::add_adamw;
use fblayout_plan::graph::precision::Precision;
use fblayout_plan::graph::{Graph, Op, Role, Sizes, derive_backward};
use fblayout_plan::layouts::LayoutChoice;
use fblayout_plan::lora::{LoraConfig, apply};
use fblayout_plan::memory::{MemoryOptions, plan_memory};
use fblayout_plan::models::bert::{self, BertConfig};
use fblayout_plan::models::llama::{self, LlamaConfig};

const SIZES: Sizes = Sizes { batch: 2, seq: 5 };
const VOCAB: u32 = 37;

/// A small BERT classifier and a small Llama decoder, each with LoRA on two projections,
/// their backward and AdamW; and the inputs of a step.
fn cases() -> Vec<(&'static str, Graph, StepInputs)> {
    let n = (SIZES.batch * SIZES.seq) as usize;
    let positions: Vec<u32> = (0..n).map(|i| (i % SIZES.seq as usize) as u32).collect();
    let with_lora = |mut g: Graph, targets: [&str; 2]| {
        apply(&mut g, &LoraConfig::new(4, 8.0, targets)).unwrap();
        derive_backward(&mut g).unwrap();
        add_adamw(&mut g).unwrap();
        g
    };
    let bert = with_lora(
        bert::forward(&BertConfig::new(VOCAB, 16, 2, 3).with_ffn(32).with_layers(2)).unwrap(),
        ["query", "value"],
    );
    let bert_inputs = StepInputs::random(VOCAB, SIZES, 3)
        .with("token_types", vec![0; n])
        .with("mask", (0..n).map(|i| u32::from(i % 5 != 4)).collect())
        .with("positions", positions.clone())
        .with("labels", bert::class_labels(&[2, 0], SIZES.seq as usize));
    let llama = with_lora(
        llama::forward(
            &LlamaConfig::new(VOCAB, 16, 4)
                .with_kv_heads(2)
                .with_ffn(24)
                .with_layers(2)
                .with_max_positions(8),
        )
        .unwrap(),
        ["q_proj", "v_proj"],
    );
    let llama_inputs = StepInputs::random(VOCAB, SIZES, 5).with("positions", positions);
    vec![("BERT", bert, bert_inputs), ("Llama", llama, llama_inputs)]
}

#[test]
fn the_adapters_products_multiply_f16_copies_their_adamw_steps_write() {
    for (what, g, _) in cases() {
        let mixed = Precision::Mixed.apply(&g).unwrap();
        let adapters: Vec<_> = mixed
            .params()
            .into_iter()
            .filter(|&p| mixed.tensor(p).name.contains(".lora_"))
            .collect();
        assert_eq!(
            adapters.len(),
            8,
            "{what}: two layers, two targets, A and B"
        );
        for p in adapters {
            let name = &mixed.tensor(p).name;
            let [copy] = mixed.copies_of(p)[..] else {
                panic!("{what}: `{name}` has {:?}", mixed.copies_of(p));
            };
            assert_eq!(mixed.tensor(copy).elem, ElemType::F16, "{what}: `{name}`");
            // Written by the weight's AdamW step, read by the forward product and the input
            // gradient (none for the first layer's `A`: nothing before it trains); the weight
            // gradient stays f32.
            let writers: Vec<Op> = mixed
                .nodes()
                .iter()
                .filter(|n| n.outputs.contains(&copy))
                .map(|n| n.op)
                .collect();
            assert_eq!(writers, [Op::AdamW { copy: true }], "{what}: `{name}`");
            let readers: Vec<Op> = mixed
                .nodes()
                .iter()
                .filter(|n| n.inputs.contains(&copy))
                .map(|n| n.op)
                .collect();
            let first_layer = name.contains(".layer.0.") || name.contains(".layers.0.");
            // `B`'s products carry peft's scaling, alpha 8 / rank 4.
            let scale = if name.contains(".lora_B") { 2.0 } else { 1.0 };
            let want: &[Op] = if first_layer && name.contains(".lora_A") {
                &[Op::LinearT { scale }]
            } else {
                &[Op::LinearT { scale }, Op::LinearTGradInput { scale }]
            };
            assert_eq!(readers, want, "{what}: `{name}`");
            let grad = mixed
                .tensors()
                .iter()
                .find(|t| t.role == Role::Grad { of: p })
                .unwrap();
            assert_eq!(grad.elem, ElemType::F32, "{what}: `{}`", grad.name);
        }
        // Nothing in the step converts anything.
        assert!(
            !mixed
                .nodes()
                .iter()
                .any(|n| matches!(n.op, Op::Convert { .. })),
            "{what}"
        );
        for n in mixed.nodes() {
            if matches!(n.op, Op::LinearT { .. } | Op::LinearTGradInput { .. }) {
                for &t in &n.inputs {
                    assert_eq!(mixed.tensor(t).elem, ElemType::F16, "{what}: {}", n.op);
                }
            }
        }
    }
}

/// Each adapter's sum with its base layer's output is done by its last product, `u·Bᵀ`, in
/// `f32` and in mixed precision, at any rank; in the backward, each gradient's sum of
/// contributions is done by the input-gradient products that make them.
#[test]
fn each_adapters_sum_is_written_by_its_last_product() {
    for (what, g, _) in cases() {
        for (precision, graph) in [
            ("f32", g.clone()),
            ("mixed", Precision::Mixed.apply(&g).unwrap()),
        ] {
            let folds = graph.folded_additions();
            let (mut forward, mut backward) = (0, 0);
            for (i, fold) in folds.iter().enumerate() {
                let Some(j) = *fold else { continue };
                let (product, add) = (&graph.nodes()[i], &graph.nodes()[j]);
                // The product's output is the sum's second summand, and nothing else reads it.
                assert_eq!(add.inputs[1], product.outputs[0], "{what}, {precision}");
                let readers = graph
                    .nodes()
                    .iter()
                    .filter(|n| n.inputs.contains(&product.outputs[0]))
                    .count();
                assert_eq!(readers, 1, "{what}, {precision}");
                if add.op == Op::Accumulate {
                    backward += 1;
                    assert!(
                        matches!(
                            product.op,
                            Op::LinearGradInput | Op::LinearTGradInput { .. }
                        ),
                        "{what}, {precision}: {}",
                        product.op
                    );
                    continue;
                }
                forward += 1;
                // peft's scaling, alpha 8 / rank 4, is the product's.
                assert_eq!(
                    product.op,
                    Op::LinearT { scale: 2.0 },
                    "{what}, {precision}"
                );
                assert_eq!(add.op, Op::Add, "{what}, {precision}");
                let b = graph.tensor(product.inputs[1]);
                assert!(
                    b.name.contains(".lora_B"),
                    "{what}, {precision}: `{}`",
                    b.name
                );
            }
            // Two layers, two adapted projections each.
            assert_eq!(forward, 4, "{what}, {precision}");
            // Every block's norms' outputs feed several projections, whose input gradients
            // are summed.
            assert!(backward >= 4, "{what}, {precision}: {backward}");
            assert_eq!(
                graph.epilogues().iter().flatten().count(),
                forward + backward + graph.folded_biases().iter().flatten().count(),
                "{what}, {precision}"
            );
        }
    }
    // A rank the short kernel does not take is added by a GEMM.
    let mut wide =
        llama::forward(&LlamaConfig::new(VOCAB, 32, 2).with_ffn(24).with_layers(1)).unwrap();
    apply(&mut wide, &LoraConfig::new(17, 34.0, ["q_proj"])).unwrap();
    let adds = wide
        .folded_additions()
        .iter()
        .flatten()
        .filter(|&&j| wide.nodes()[j].op == Op::Add)
        .count();
    assert_eq!(adds, 1);
}

#[test]
fn a_frozen_weights_gradient_stays_f32_in_mixed_precision() {
    for (what, g, _) in cases() {
        let mixed = Precision::Mixed.apply(&g).unwrap();
        let frozen_grads: Vec<_> = mixed
            .tensors()
            .iter()
            .filter(
                |t| matches!(t.role, Role::Grad { of } if mixed.tensor(of).role == Role::Frozen),
            )
            .collect();
        if what == "BERT" {
            // Every LayerNorm of BERT is frozen, and its backward writes both gradients.
            assert!(!frozen_grads.is_empty(), "{what}");
        }
        for t in frozen_grads {
            assert_eq!(t.elem, ElemType::F32, "{what}: `{}`", t.name);
        }
    }
}

#[test]
fn a_lora_step_in_mixed_precision_agrees_with_the_f64_step() {
    let gpu = exec_support::gpu();
    for (what, g, inputs) in cases() {
        let layouts = vec![LayoutChoice::RowMajor; g.tensors().len()];
        let memory = plan_memory(&g, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut cpu = CpuStep::new(&g, &layouts, &memory, SIZES, AdamWConfig::default()).unwrap();
        cpu.init_params(7).unwrap();
        let want = cpu.step(&inputs).unwrap();

        let mixed = Precision::Mixed.apply(&g).unwrap();
        let layouts = vec![LayoutChoice::RowMajor; mixed.tensors().len()];
        let memory = plan_memory(&mixed, &layouts, SIZES, MemoryOptions::default()).unwrap();
        let mut step = GpuStep::new(
            &gpu,
            &mixed,
            &layouts,
            &memory,
            SIZES,
            AdamWConfig::default(),
        )
        .unwrap();
        step.upload_params(7).unwrap();
        let got = f64::from(step.step(&inputs).unwrap());
        // f16 activations round each value to 2⁻¹¹ relative; over two blocks the loss stays
        // within 1 %.
        assert!(
            (got - want).abs() <= 1e-2 * want.abs(),
            "{what}: mixed-precision GPU loss {got} against the f64 CPU loss {want}"
        );
        // The first step's scaled gradients were finite, so AdamW applied it.
        assert!(
            !step.last_step_skipped(),
            "{what}: the first step overflowed"
        );
    }
}
