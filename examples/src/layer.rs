//! The views of the layer's plan that the main job prints and checks: each declaration, and
//! the views the kernels read its tensors through.

use fblayout_core::layout::{BoundView, View};
use fblayout_kernels::ops::attention::qkv_views;

use crate::encoder::plan::{Kind, Plan};

/// A view with the extents it is bound to.
pub(crate) struct PlannedView {
    pub(crate) view: View,
    pub(crate) bind: Vec<(&'static str, u32)>,
    pub(crate) bound: BoundView,
}

/// Every declaration of `plan` as declared, then the views of them that the kernels read:
/// activations and per-token statistics as token matrices, the fused projection as queries,
/// keys and values, the attention context as heads. Each view is named for what it is, so
/// their WGSL functions don't clash.
pub(crate) fn plan(plan: &Plan) -> Result<Vec<PlannedView>, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let c = plan.config;
    let mut views: Vec<(View, Vec<(&'static str, u32)>)> = Vec::new();
    for (name, decl) in plan.declarations() {
        let bind = match decl.kind {
            Kind::Activation | Kind::PerToken => c.bind(),
            Kind::Scores => vec![("batch", c.batch), ("seq_q", c.seq), ("seq_k", c.seq)],
            Kind::Weight | Kind::Vector => Vec::new(),
        };
        let view = decl.layout.view();
        views.push((view.clone(), bind.clone()));
        if matches!(decl.kind, Kind::Activation | Kind::PerToken) {
            let tokens = view
                .merge(&["batch", "seq"], "tokens")
                .and_then(|v| v.named(format!("{name}_tokens")))
                .map_err(|x| e(&x))?;
            views.push((tokens, bind.clone()));
        }
        if name == "act_qkv" {
            let (q, k, v) = qkv_views(&view, c.heads, c.heads).map_err(|x| e(&x))?;
            for (part, v) in [("q", q), ("k", k), ("v", v)] {
                views.push((v.named(part).map_err(|x| e(&x))?, bind.clone()));
            }
        }
        if name == "act" {
            let heads = view
                .split("hidden", &[("heads", Some(c.heads)), ("head_dim", None)])
                .and_then(|v| v.named("act_heads"))
                .map_err(|x| e(&x))?;
            views.push((heads, bind.clone()));
        }
    }
    views
        .into_iter()
        .map(|(view, bind)| {
            let bound = view.bind(&bind).map_err(|x| e(&x))?;
            Ok(PlannedView { view, bind, bound })
        })
        .collect()
}
