//! The generic contract tests: every registered operation's contract is consistent with
//! itself and with the contracts it names.

use std::collections::HashSet;

use super::{Slot, ViewRule, registry};
use crate::graph::{Phase, Source};
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
fn products_multiply_input_roles_and_scratch_is_counted_for_the_attention() {
    let config = ModelConfig::new(50, 32, 4)
        .with_max_positions(16)
        .with_ffn(64)
        .with_layers(1);
    let sizes = crate::graph::Sizes { batch: 2, seq: 8 };
    for model in [Model::Encoder, Model::Decoder] {
        let g = build(model, config).unwrap();
        let one = |_| 1u64;
        for node in g.nodes() {
            let c = node.op.contract();
            let shapes = super::shapes(&g, node, sizes, &one);
            if let Some(p) = c.product(&shapes) {
                let ins: Vec<&str> = c.inputs().iter().map(|s| s.name).collect();
                assert!(
                    ins.contains(&p.a.0) && ins.contains(&p.b.0),
                    "{:?}",
                    node.op
                );
                assert!(p.flops > 0.0, "{:?}", node.op);
            }
            let scratch = c.scratch_bytes(&shapes);
            let attention = matches!(
                node.op,
                crate::graph::Op::Attention { .. } | crate::graph::Op::AttentionGrad { .. }
            );
            assert_eq!(scratch > 0, attention, "{:?}", node.op);
        }
    }
}
