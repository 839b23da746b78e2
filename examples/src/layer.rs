//! The tensors of one transformer layer, as fblayout layouts and views.

use fblayout_core::layout::{BoundView, LayoutSpec, TensorLayout, View};

/// The sizes of the layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LayerConfig {
    pub(crate) batch: u32,
    pub(crate) seq: u32,
    pub(crate) hidden: u32,
    pub(crate) heads: u32,
    pub(crate) ffn: u32,
}

/// A view with the extents it is bound to.
pub(crate) struct PlannedView {
    pub(crate) view: View,
    pub(crate) bind: Vec<(&'static str, u32)>,
    pub(crate) bound: BoundView,
}

fn plain(layout: &TensorLayout) -> Result<View, String> {
    Ok(layout.view())
}

/// Builds every tensor and view of the layer and binds it.
pub(crate) fn plan(c: &LayerConfig) -> Result<Vec<PlannedView>, String> {
    if c.heads == 0 || !c.hidden.is_multiple_of(c.heads) {
        return Err(format!(
            "--hidden {} is not a multiple of --heads {}",
            c.hidden, c.heads
        ));
    }
    let e = |err: fblayout_core::layout::LayoutErrors| err.to_string();
    let v = |err: fblayout_core::layout::LayoutError| err.to_string();
    // Activations: LayerNorm reduces hidden (forward); bias/weight gradients reduce tokens.
    let x = LayoutSpec::new("x")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("hidden", c.hidden)
        .rtile()
        .reduce_forward(["hidden"])
        .reduce_backward(["seq"])
        .build()
        .map_err(e)?;
    // Weights [in, out]: the forward matmul reduces `in`, dW = Xᵀ·dY and dX reduce `out`.
    let weight = |name: &str, i: u32, o: u32| {
        LayoutSpec::new(name)
            .axis("d_in", i)
            .axis("d_out", o)
            .rtile()
            .reduce_forward(["d_in"])
            .reduce_backward(["d_out"])
            .build()
            .map_err(e)
    };
    let w_qkv = weight("w_qkv", c.hidden, 3 * c.hidden)?;
    let w_up = weight("w_up", c.hidden, c.ffn)?;
    let w_down = weight("w_down", c.ffn, c.hidden)?;
    let q = LayoutSpec::new("q")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("heads", c.heads)
        .axis("head_dim", c.hidden / c.heads)
        .build()
        .map_err(e)?;
    let scores = LayoutSpec::new("scores")
        .dyn_axis("batch")
        .axis("heads", c.heads)
        .dyn_axis("seq_q")
        .dyn_axis("seq_k")
        .rtile()
        .reduce_forward(["seq_k"])
        .reduce_backward(["seq_q"])
        .build()
        .map_err(e)?;
    let h = LayoutSpec::new("ffn_act")
        .dyn_axis("batch")
        .dyn_axis("seq")
        .axis("ffn", c.ffn)
        .rtile()
        .reduce_forward(["ffn"])
        .reduce_backward(["seq"])
        .build()
        .map_err(e)?;

    let tokens = x
        .view()
        .named("x_tokens")
        .map_err(v)?
        .merge(&["batch", "seq"], "tokens")
        .map_err(v)?;
    let x_t = tokens
        .clone()
        .named("x_t")
        .map_err(v)?
        .transpose("tokens", "hidden")
        .map_err(v)?;
    let q_bhsd = q
        .view()
        .named("q_bhsd")
        .map_err(v)?
        .permute(&["batch", "heads", "seq", "head_dim"])
        .map_err(v)?;
    let k_t = q
        .view()
        .named("k_t")
        .map_err(v)?
        .permute(&["batch", "heads", "head_dim", "seq"])
        .map_err(v)?;
    let w_qkv_t = w_qkv
        .view()
        .named("w_qkv_t")
        .map_err(v)?
        .transpose("d_in", "d_out")
        .map_err(v)?;

    let bs = vec![("batch", c.batch), ("seq", c.seq)];
    let attn = vec![("batch", c.batch), ("seq_q", c.seq), ("seq_k", c.seq)];
    let entries: Vec<(View, Vec<(&'static str, u32)>)> = vec![
        (plain(&x)?, bs.clone()),
        (tokens, bs.clone()),
        (x_t, bs.clone()),
        (plain(&w_qkv)?, vec![]),
        (w_qkv_t, vec![]),
        (plain(&q)?, bs.clone()),
        (q_bhsd, bs.clone()),
        (k_t, bs.clone()),
        (plain(&scores)?, attn),
        (plain(&w_up)?, vec![]),
        (plain(&h)?, bs),
        (plain(&w_down)?, vec![]),
    ];
    entries
        .into_iter()
        .map(|(view, bind)| {
            let bound = view.bind(&bind).map_err(v)?;
            Ok(PlannedView { view, bind, bound })
        })
        .collect()
}
