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
//! Which view each operand takes is its role's [`ViewRule`] in the operation's contract
//! ([`crate::ops`]); [`op_views`] builds them, and both executors take their operands from it,
//! by role (an attention's one fused input becomes three operands, `q`, `k` and `v`).

use fblayout_core::layout::{BoundView, LayoutError, TensorLayout, View};
use fblayout_kernels::ops::qkv_views;

use super::ExecError;
use crate::graph::{Dim, Graph, Node, Sizes, TensorId};
use crate::layouts::{LayoutChoice, tensor_layouts};
use crate::ops::args::Bound;
use crate::ops::{Args, Slot, ViewRule};

/// The operands of one operation by role, each the view its kernel reads or writes it through
/// (for AdamW, the parameter and moments it updates in place are among what it writes).
pub type OpViews = Args<View>;

/// A view bound to a run's sizes.
#[derive(Debug, Clone)]
pub struct BoundOperand {
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
    /// Every operation's operands by role ([`op_views`]), bound, by node index.
    pub ops: Vec<Args<BoundOperand>>,
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
    let mut ops = Vec::with_capacity(graph.nodes().len());
    for node in graph.nodes() {
        let views = op_views(graph, node, &layouts)?;
        ops.push(views.try_map(|o| {
            Ok::<_, ExecError>(BoundOperand {
                bound: bind(o.tensor, &o.value)?,
                view: o.value.clone(),
            })
        })?);
    }
    Ok(BoundGraph { whole, ops })
}

/// The operands of `node` of `graph`, whose tensors have `layouts`, by role: each the view its
/// contract's [`ViewRule`] names (see the module docs).
pub fn op_views(
    graph: &Graph,
    node: &Node,
    layouts: &[TensorLayout],
) -> Result<OpViews, ExecError> {
    let views = Views { graph, layouts };
    let contract = node.op.contract();
    let side = |slots: Vec<Slot>, ids: &[TensorId]| -> Result<Vec<Bound<View>>, ExecError> {
        if slots.len() != ids.len() {
            return Err(ExecError::View {
                tensor: node.op.name().to_owned(),
                view: "its operands".into(),
                detail: format!("{} roles, {} tensors", slots.len(), ids.len()),
            });
        }
        let mut out = Vec::with_capacity(ids.len());
        for (slot, &t) in slots.iter().zip(ids) {
            let names = slot.operand_names();
            for (name, view) in names.into_iter().zip(views.of(t, slot.view)?) {
                out.push(Bound {
                    role: name,
                    tensor: t,
                    value: view,
                });
            }
        }
        Ok(out)
    };
    Ok(Args::new(
        node.op.name(),
        side(contract.inputs(), &node.inputs)?,
        side(contract.outputs(), &node.outputs)?,
    ))
}

struct Views<'a> {
    graph: &'a Graph,
    layouts: &'a [TensorLayout],
}

impl Views<'_> {
    /// The views of `t` that `rule` names (three for a fused projection).
    fn of(&self, t: TensorId, rule: ViewRule) -> Result<Vec<View>, ExecError> {
        Ok(match rule {
            ViewRule::Whole => vec![self.layouts[t.index()].view()],
            ViewRule::Tokens => vec![self.tokens(t)?],
            ViewRule::TokensWhereAny if self.has_tokens(t) => vec![self.tokens(t)?],
            ViewRule::TokensWhereAny => vec![self.layouts[t.index()].view()],
            ViewRule::Transposed => vec![self.transposed(t)?],
            ViewRule::Heads { heads } => vec![self.heads(t, heads)?],
            ViewRule::Qkv {
                heads, kv_heads, ..
            } => self.qkv(t, heads, kv_heads)?,
        })
    }

    fn failed(&self, t: TensorId, what: &str, source: LayoutError) -> ExecError {
        ExecError::View {
            tensor: self.graph.tensor(t).name.clone(),
            view: what.to_owned(),
            detail: source.to_string(),
        }
    }

    /// Whether `t` leads with two run-time batch and sequence axes (what
    /// [`tokens`](Self::tokens) merges).
    fn has_tokens(&self, t: TensorId) -> bool {
        let axes = &self.graph.tensor(t).axes;
        axes.iter()
            .take_while(|a| matches!(a.dim, Dim::Batch | Dim::Seq))
            .count()
            == 2
    }

    /// `t` with its leading batch and sequence axes merged into `tokens`.
    fn tokens(&self, t: TensorId) -> Result<View, ExecError> {
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
        Ok(view)
    }

    /// The matrix `t` with its two axes swapped.
    fn transposed(&self, t: TensorId) -> Result<View, ExecError> {
        let tensor = self.graph.tensor(t);
        let [a, b] = tensor.axes.as_slice() else {
            return Err(ExecError::View {
                tensor: tensor.name.clone(),
                view: "transposed".into(),
                detail: format!("a transpose needs two axes; it has {}", tensor.axes.len()),
            });
        };
        self.layouts[t.index()]
            .view()
            .transpose(&a.name, &b.name)
            .map_err(|e| self.failed(t, "transposed", e))
    }

    /// `t` `[batch, seq, heads · head_dim]` as `[batch, seq, heads, head_dim]`.
    fn heads(&self, t: TensorId, heads: u32) -> Result<View, ExecError> {
        let last = self.graph.tensor(t).axes.last().map(|a| a.name.clone());
        let last = last.unwrap_or_default();
        let view = self.layouts[t.index()]
            .view()
            .split(&last, &[("heads", Some(heads)), ("head_dim", None)])
            .map_err(|e| self.failed(t, "heads", e))?;
        Ok(view)
    }

    /// The queries, keys and values of the fused projection `t`.
    fn qkv(&self, t: TensorId, heads: u32, kv_heads: u32) -> Result<Vec<View>, ExecError> {
        let (q, k, v) =
            qkv_views(&self.layouts[t.index()].view(), heads, kv_heads).map_err(|e| {
                ExecError::View {
                    tensor: self.graph.tensor(t).name.clone(),
                    view: "queries, keys and values".into(),
                    detail: e.to_string(),
                }
            })?;
        Ok(vec![q, k, v])
    }
}
