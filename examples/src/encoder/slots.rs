//! The views the layer's kernels read its tensors through, each bound once.
//!
//! A slot is a tensor read through one view: `"x"` as declared, `"x@tokens"` as a matrix of
//! tokens, `"qkv@q"` as the queries of the fused projection. Both backends take their operands
//! from here, so the GPU and the CPU read every tensor through the same views.

use std::collections::BTreeMap;

use fblayout_core::layout::{BoundView, View};
use fblayout_kernels::ops::attention::qkv_views;

use super::plan::{Kind, Plan};

/// A tensor read through a view, bound to the layer's extents.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// The tensor (whose buffer the view reads).
    pub(crate) tensor: &'static str,
    pub(crate) view: View,
    pub(crate) bound: BoundView,
}

/// Every slot of the layer, by key.
#[derive(Debug)]
pub(crate) struct Slots {
    slots: BTreeMap<String, Slot>,
}

impl Slots {
    /// The slots of every tensor of `plan`: each as declared, activations and per-token
    /// tensors as token matrices, the fused projection (and its gradient) as queries, keys and
    /// values, the attention context (and its gradient) as heads.
    pub(crate) fn new(plan: &Plan) -> Result<Self, String> {
        let mut slots = BTreeMap::new();
        let c = plan.config;
        let mut add = |key: String, tensor: &'static str, view: View| -> Result<(), String> {
            let bound = view
                .bind(&plan.bind(tensor))
                .map_err(|e| format!("binding `{key}`: {e}"))?;
            slots.insert(
                key,
                Slot {
                    tensor,
                    view,
                    bound,
                },
            );
            Ok(())
        };
        for name in plan.names() {
            add(name.to_owned(), name, plan.view(name))?;
            if matches!(plan.decl(name).kind, Kind::Activation | Kind::PerToken) {
                add(format!("{name}@tokens"), name, plan.tokens(name)?)?;
            }
        }
        for name in ["qkv", "d_qkv"] {
            let (q, k, v) =
                qkv_views(&plan.view(name), c.heads, c.heads).map_err(|e| e.to_string())?;
            add(format!("{name}@q"), name, q)?;
            add(format!("{name}@k"), name, k)?;
            add(format!("{name}@v"), name, v)?;
        }
        for name in ["ctx", "d_ctx"] {
            add(format!("{name}@heads"), name, plan.heads(name)?)?;
        }
        Ok(Self { slots })
    }

    /// The slot `key`.
    pub(crate) fn get(&self, key: &str) -> &Slot {
        self.slots
            .get(key)
            .unwrap_or_else(|| panic!("the layer has no slot `{key}`"))
    }

    /// The view of slot `key`.
    pub(crate) fn view(&self, key: &str) -> &View {
        &self.get(key).view
    }
}
