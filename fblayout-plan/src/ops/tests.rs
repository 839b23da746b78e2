//! The generic contract tests: every registered operation's contract is consistent with
//! itself and with the contracts it names.

use std::collections::HashSet;

use super::{Slot, ViewRule, registry};
use fblayout_kernels::runtime::granular;

use crate::graph::{Op, Phase, Source};
use crate::models::{Model, ModelConfig, build};

fn operand_names(slots: &[Slot]) -> Vec<&'static str> {
    slots.iter().flat_map(Slot::operand_names).collect()
}

#[test]
fn every_contract_names_its_roles_once_and_reads_and_writes_something() {
    for op in registry() {
        let c = op.contract();
        assert_eq!(op.name(), c.name());
        let (ins, outs) = (c.inputs(), c.outputs());
        assert!(!ins.is_empty() && !outs.is_empty(), "{op:?}");
        for side in [operand_names(&ins), operand_names(&outs)] {
            let unique: HashSet<_> = side.iter().collect();
            assert_eq!(unique.len(), side.len(), "{op:?}: a role is named twice");
        }
        for slot in ins.iter().chain(&outs) {
            assert!(
                !slot.access.is_empty(),
                "{op:?}: `{}` has no walk",
                slot.name
            );
            if let ViewRule::Qkv { names, .. } = slot.view {
                assert_eq!(slot.operand_names(), names.to_vec());
            }
        }
    }
}

#[test]
fn index_bounds_name_roles_of_their_contract() {
    for op in registry() {
        let c = op.contract();
        let roles: Vec<&str> = c
            .inputs()
            .iter()
            .chain(&c.outputs())
            .map(|s| s.name)
            .collect();
        for b in c.index_bounds() {
            assert!(roles.contains(&b.ids), "{op:?}: `{}`", b.ids);
            assert!(roles.contains(&b.into), "{op:?}: `{}`", b.into);
        }
    }
}

#[test]
fn backward_rules_read_and_write_within_their_operations_arity() {
    for op in registry() {
        let c = op.contract();
        let rule = c.backward();
        // A conversion is inserted after the backward is derived, in the pass of its reader.
        let differentiated = c.phase() == Phase::Forward && c.kind().is_some();
        assert_eq!(
            rule.is_some(),
            differentiated,
            "{op:?}: forward operations, and only they, have a backward rule"
        );
        let Some(rule) = rule else { continue };
        let (n_in, n_out) = op.arity();
        for &p in &rule.passes_through {
            assert!(p < n_in, "{op:?}");
        }
        for step in &rule.steps {
            assert_eq!(step.op.phase(), Phase::Backward, "{op:?} → {:?}", step.op);
            let (s_in, s_out) = step.op.arity();
            assert_eq!(step.inputs.len(), s_in, "{op:?} → {:?}", step.op);
            assert_eq!(step.grads_of.len(), s_out, "{op:?} → {:?}", step.op);
            for source in &step.inputs {
                match *source {
                    Source::Input(i) => assert!(i < n_in, "{op:?}"),
                    Source::Output(i) | Source::OutputGrad(i) => assert!(i < n_out, "{op:?}"),
                }
            }
            for &g in &step.grads_of {
                assert!(g < n_in, "{op:?}");
            }
        }
    }
}

#[test]
fn products_multiply_input_roles_and_scratch_is_counted_where_kernels_take_it() {
    let config = ModelConfig::new(50, 32, 4)
        .with_max_positions(16)
        .with_ffn(64)
        .with_layers(1);
    let sizes = crate::graph::Sizes { batch: 2, seq: 8 };
    let llama = crate::models::llama::LlamaConfig::new(50, 32, 4)
        .with_kv_heads(2)
        .with_ffn(64)
        .with_layers(1)
        .with_max_positions(16);
    let graphs = [
        build(Model::Encoder, config).unwrap(),
        build(Model::Decoder, config).unwrap(),
        crate::models::llama::build(&llama).unwrap(),
    ];
    for g in graphs {
        // Every tensor dense, as a row-major layout stores it.
        let elements = |t: crate::graph::TensorId| g.tensor(t).bytes(sizes);
        for node in g.nodes() {
            let c = node.op.contract();
            let shapes = super::shapes(&g, node, sizes, &elements);
            if let Some(p) = c.product(&shapes) {
                let ins: Vec<&str> = c.inputs().iter().map(|s| s.name).collect();
                assert!(
                    ins.contains(&p.a.0) && ins.contains(&p.b.0),
                    "{:?}",
                    node.op
                );
                assert!(p.flops > 0.0, "{:?}", node.op);
            }
            // At these sizes no product splits its reduction: the attention's scores and the
            // partial sums of the weight gradients' row reductions are all the scratch there is.
            let scratch = c.scratch(&shapes).unwrap();
            let (scores, partials) = match node.op {
                Op::Attention { .. } | Op::AttentionSeparate { .. } => (1, 0),
                Op::AttentionGrad { .. } | Op::AttentionSeparateGrad { .. } => (2, 0),
                Op::BiasGrad | Op::RmsNormGrad { .. } => (0, 1),
                Op::LayerNormGrad { .. } => (0, 2),
                _ => (0, 0),
            };
            assert_eq!(
                scratch.buffers().len(),
                scores + partials,
                "{:?}: {scratch}",
                node.op
            );
            if scores > 0 {
                let probs = shapes.bytes("probs");
                assert!(
                    scratch.buffers().iter().all(|&b| b == granular(probs)),
                    "{:?}: {scratch}, probabilities of {probs} bytes",
                    node.op
                );
            }
        }
    }
}
