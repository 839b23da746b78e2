//! The views each operation's kernel reads and writes its operands through.
//!
//! A graph tensor is stored in one layout (its [`LayoutChoice`]); a kernel reads it through a
//! view of that layout, never a copy: an activation `[batch, seq, width]` as a matrix of tokens
//! (`merge(batch, seq → tokens)`), a per-token tensor `[batch, seq]` as `[tokens]`, the fused
//! projection of an attention as its queries, keys and values
//! ([`qkv_views`]), the attention's context as heads (`split(width → heads, head_dim)`), and
//! every other tensor (weights, vectors, probabilities, optimizer state) as declared. A
//! gradient is read through the view of the tensor it is the gradient of, because it has that
//! tensor's shape and the same rule applies to it.
//!
//! [`op_views`] is the one place that says which: both executors take their operands from it,
//! in the order their kernels take them (an attention's one fused input becomes three operands).

use fblayout_core::layout::{BoundView, LayoutError, TensorLayout, View};
use fblayout_kernels::ops::qkv_views;

use super::ExecError;
use crate::graph::{Dim, Graph, Node, Op, Role, Sizes, TensorId};
use crate::layouts::LayoutChoice;

/// A tensor read or written through a view.
#[derive(Debug, Clone)]
pub struct Operand {
    /// The tensor whose buffer the view addresses.
    pub tensor: TensorId,
    /// The view.
    pub view: View,
}

/// The operands of one operation, in its kernel's order.
#[derive(Debug, Clone)]
pub struct OpViews {
    /// What the kernel reads.
    pub reads: Vec<Operand>,
    /// What the kernel writes (for AdamW, the parameter and moments it updates in place).
    pub writes: Vec<Operand>,
}

/// An operand bound to a run's sizes.
#[derive(Debug, Clone)]
pub struct BoundOperand {
    /// The tensor whose buffer the view addresses.
    pub tensor: TensorId,
    /// The view.
    pub view: View,
    /// The view bound to the tensor's run-time extents.
    pub bound: BoundView,
}

/// A graph's tensors and every operation's operands, bound to a run's sizes.
#[derive(Debug, Clone)]
pub struct BoundGraph {
    /// Every tensor as declared (its layout's identity view), bound, by tensor index.
    pub whole: Vec<BoundView>,
    /// Every operation's reads and writes ([`op_views`]), bound, by node index.
    pub ops: Vec<(Vec<BoundOperand>, Vec<BoundOperand>)>,
}

/// Every tensor of `graph` stored as `choices` says, and every operand of its operations,
/// bound to `sizes`.
pub fn bind_graph(
    graph: &Graph,
    choices: &[LayoutChoice],
    sizes: Sizes,
) -> Result<BoundGraph, ExecError> {
    let layouts = tensor_layouts(graph, choices)?;
    let bind = |t: TensorId, view: &View| {
        let tensor = graph.tensor(t);
        view.bind(&tensor.run_extents(sizes))
            .map_err(|source| ExecError::bind(&tensor.name, source))
    };
    let whole = graph
        .ids()
        .map(|t| bind(t, &layouts[t.index()].view()))
        .collect::<Result<Vec<_>, _>>()?;
    let bound = |ops: Vec<Operand>| {
        ops.into_iter()
            .map(|o| {
                Ok(BoundOperand {
                    bound: bind(o.tensor, &o.view)?,
                    tensor: o.tensor,
                    view: o.view,
                })
            })
            .collect::<Result<Vec<_>, ExecError>>()
    };
    let mut ops = Vec::with_capacity(graph.nodes().len());
    for node in graph.nodes() {
        let views = op_views(graph, node, &layouts)?;
        ops.push((bound(views.reads)?, bound(views.writes)?));
    }
    Ok(BoundGraph { whole, ops })
}

/// The layout of every tensor of `graph` stored as `choices` says (one per tensor, by id).
///
/// Layouts are named after their tensors, with every character that can't be part of a Rust
/// or WGSL identifier (the dots of `l0.attn.qkv`) replaced by `_`. A gradient stored like the
/// tensor it is the gradient of shares that tensor's layout (the same declaration, so the same
/// views): GPU kernels read a gradient through the view of its tensor and check that they are
/// one.
pub fn tensor_layouts(
    graph: &Graph,
    choices: &[LayoutChoice],
) -> Result<Vec<TensorLayout>, ExecError> {
    if choices.len() != graph.tensors().len() {
        return Err(ExecError::LayoutCount {
            tensors: graph.tensors().len(),
            layouts: choices.len(),
        });
    }
    let own = |t: TensorId| {
        let (tensor, choice) = (graph.tensor(t), choices[t.index()]);
        choice
            .layout(&identifier(&tensor.name), tensor)
            .map_err(|source| ExecError::Layout {
                tensor: tensor.name.clone(),
                choice,
                source,
            })
    };
    let mut layouts: Vec<Option<TensorLayout>> = vec![None; choices.len()];
    for t in graph.ids() {
        if !graph.tensor(t).is_grad() {
            layouts[t.index()] = Some(own(t)?);
        }
    }
    for t in graph.ids() {
        if let Role::Grad { of } = graph.tensor(t).role {
            let shared = layouts[of.index()]
                .as_ref()
                .filter(|_| choices[of.index()] == choices[t.index()])
                .cloned();
            layouts[t.index()] = Some(match shared {
                Some(layout) => layout,
                None => own(t)?,
            });
        }
    }
    Ok(layouts.into_iter().flatten().collect())
}

/// `name` with every character that is not ASCII alphanumeric replaced by `_`.
fn identifier(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The operands of `node` of `graph`, whose tensors have `layouts` (see the module docs).
pub fn op_views(
    graph: &Graph,
    node: &Node,
    layouts: &[TensorLayout],
) -> Result<OpViews, ExecError> {
    let views = Views { graph, layouts };
    let (i, o) = (&node.inputs, &node.outputs);
    let tok = |t: TensorId| views.tokens(t);
    let whole = |t: TensorId| Ok(views.operand(t, layouts[t.index()].view()));
    let all = |ts: &[TensorId], f: &dyn Fn(TensorId) -> Result<Operand, ExecError>| {
        ts.iter().map(|&t| f(t)).collect::<Result<Vec<_>, _>>()
    };
    let (reads, writes) = match node.op {
        // Token matrices in, token matrices out.
        Op::Linear | Op::Bias | Op::LayerNorm { .. } | Op::RmsNorm { .. } => {
            // The first input is a token matrix; the weight or vectors are read as declared.
            let mut reads = vec![tok(i[0])?];
            reads.extend(all(&i[1..], &whole)?);
            (reads, all(o, &tok)?)
        }
        Op::Add
        | Op::Accumulate
        | Op::Activation(_)
        | Op::ActivationGrad(_)
        | Op::Swiglu
        | Op::SwigluGrad
        | Op::CrossEntropy { .. }
        | Op::CrossEntropyGrad { .. } => (all(i, &tok)?, all(o, &tok)?),
        Op::Embedding => (vec![tok(i[0])?, whole(i[1])?], all(o, &tok)?),
        Op::EmbeddingGrad => (all(i, &tok)?, all(o, &whole)?),
        Op::LinearGradInput => (vec![tok(i[0])?, whole(i[1])?], all(o, &tok)?),
        Op::LinearGradWeight => (all(i, &tok)?, all(o, &whole)?),
        Op::BiasGrad => (all(i, &tok)?, all(o, &whole)?),
        Op::LayerNormGrad { .. } | Op::RmsNormGrad { .. } => {
            // x, γ, statistics..., dy → dx, dγ (, dβ): γ and its gradient as declared.
            let mut reads = Vec::with_capacity(i.len());
            for (k, &t) in i.iter().enumerate() {
                reads.push(if k == 1 { whole(t)? } else { tok(t)? });
            }
            let mut writes = vec![tok(o[0])?];
            writes.extend(all(&o[1..], &whole)?);
            (reads, writes)
        }
        Op::Attention {
            heads, kv_heads, ..
        } => {
            let reads = views.qkv(i[0], heads, kv_heads)?;
            (reads, vec![views.heads(o[0], heads)?, whole(o[1])?])
        }
        Op::AttentionGrad {
            heads, kv_heads, ..
        } => {
            let mut reads = views.qkv(i[0], heads, kv_heads)?;
            reads.push(whole(i[1])?);
            reads.push(views.heads(i[2], heads)?);
            (reads, views.qkv(o[0], heads, kv_heads)?)
        }
        Op::AdamW { .. } | Op::Convert { .. } => (all(i, &whole)?, all(o, &whole)?),
    };
    Ok(OpViews { reads, writes })
}

struct Views<'a> {
    graph: &'a Graph,
    layouts: &'a [TensorLayout],
}

impl Views<'_> {
    fn operand(&self, tensor: TensorId, view: View) -> Operand {
        Operand { tensor, view }
    }

    fn failed(&self, t: TensorId, what: &str, source: LayoutError) -> ExecError {
        ExecError::View {
            tensor: self.graph.tensor(t).name.clone(),
            view: what.to_owned(),
            detail: source.to_string(),
        }
    }

    /// `t` with its leading batch and sequence axes merged into `tokens`.
    fn tokens(&self, t: TensorId) -> Result<Operand, ExecError> {
        let tensor = self.graph.tensor(t);
        let lead: Vec<&str> = tensor
            .axes
            .iter()
            .take_while(|a| matches!(a.dim, Dim::Batch | Dim::Seq))
            .map(|a| a.name.as_str())
            .collect();
        if lead.len() != 2 {
            return Err(ExecError::View {
                tensor: tensor.name.clone(),
                view: "tokens".into(),
                detail: format!(
                    "a token matrix needs two leading run-time axes (batch and sequence); it has {:?}",
                    tensor
                        .axes
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                ),
            });
        }
        let view = self.layouts[t.index()]
            .view()
            .merge(&lead, "tokens")
            .map_err(|e| self.failed(t, "tokens", e))?;
        Ok(self.operand(t, view))
    }

    /// `t` `[batch, seq, heads · head_dim]` as `[batch, seq, heads, head_dim]`.
    fn heads(&self, t: TensorId, heads: u32) -> Result<Operand, ExecError> {
        let last = self.graph.tensor(t).axes.last().map(|a| a.name.clone());
        let last = last.unwrap_or_default();
        let view = self.layouts[t.index()]
            .view()
            .split(&last, &[("heads", Some(heads)), ("head_dim", None)])
            .map_err(|e| self.failed(t, "heads", e))?;
        Ok(self.operand(t, view))
    }

    /// The queries, keys and values of the fused projection `t`.
    fn qkv(&self, t: TensorId, heads: u32, kv_heads: u32) -> Result<Vec<Operand>, ExecError> {
        let (q, k, v) =
            qkv_views(&self.layouts[t.index()].view(), heads, kv_heads).map_err(|e| {
                ExecError::View {
                    tensor: self.graph.tensor(t).name.clone(),
                    view: "queries, keys and values".into(),
                    detail: e.to_string(),
                }
            })?;
        Ok(vec![
            self.operand(t, q),
            self.operand(t, k),
            self.operand(t, v),
        ])
    }
}
