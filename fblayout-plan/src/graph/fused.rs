//! Attention that never stores its probabilities: a training graph's materialised attentions
//! rewritten, one by one, into fused ones ([`Op::FusedAttention`]).
//!
//! A materialised attention saves its probabilities `[batch, heads, seq, seq]` for the
//! backward; the fused one saves the log-sum-exp of each query's scaled scores `[batch,
//! heads, seq]` (`f32` in every precision) and its backward reads the context it wrote, so
//! what an attention keeps from the forward to the backward shrinks from `seq` numbers per
//! query and head to one, at the price of computing the scores again. The rewrite keeps every
//! tensor id: the probabilities' tensor becomes the log-sum-exp (renamed `<name>.lse`), the
//! forward's operation becomes the fused one, and its backward reads the projections (and
//! padding mask), the context, the log-sum-exp and the context's gradient.

use fblayout_core::layout::ElemType;

use super::{Dim, FusedAttention, Graph, GraphError, NodeId, Op, TensorId};

impl Graph {
    /// The materialised attention forwards ([`Op::Attention`], [`Op::AttentionSeparate`]), in
    /// order: what [`with_fused_attention`](Self::with_fused_attention) can fuse.
    pub fn attentions(&self) -> Vec<NodeId> {
        self.node_ids()
            .filter(|&n| fused_params(self.nodes()[n.index()].op).is_some())
            .collect()
    }

    /// The head size of each attention forward, materialised or fused, in order: its context's
    /// width over its query heads (`None` where that width is not a fixed number).
    pub fn attention_head_dims(&self) -> Vec<Option<u32>> {
        self.nodes()
            .iter()
            .filter_map(|node| {
                let heads = match node.op {
                    Op::Attention { heads, .. } | Op::AttentionSeparate { heads, .. } => heads,
                    Op::FusedAttention(FusedAttention { heads, .. }) => heads,
                    _ => return None,
                };
                let ctx = node.outputs.first().map(|&t| self.tensor(t));
                Some(ctx.and_then(|c| match c.axes.last()?.dim {
                    Dim::Fixed(width) => Some(width / heads.max(1)),
                    _ => None,
                }))
            })
            .collect()
    }

    /// This graph with the attention forwards `which` (from [`attentions`](Self::attentions))
    /// fused, and their backwards where the graph has them (see the module docs). Every other
    /// operation and every tensor id stays as it was.
    ///
    /// An id that is no materialised attention forward, a probabilities tensor that anything
    /// but the attention's own backward reads, or a log-sum-exp name already taken is an
    /// error; the rewritten operations pass the same shape checks as [`push`](Self::push).
    pub fn with_fused_attention(&self, which: &[NodeId]) -> Result<Graph, GraphError> {
        let mut g = self.clone();
        for &at in which {
            g.fuse_one(at)?;
        }
        Ok(g)
    }

    fn fuse_one(&mut self, at: NodeId) -> Result<(), GraphError> {
        let error = |detail: String| GraphError::Shape {
            op: "fused attention",
            detail,
        };
        let node = self
            .nodes
            .get(at.index())
            .ok_or_else(|| error(format!("there is no operation {}", at.index())))?
            .clone();
        let params = fused_params(node.op).ok_or_else(|| {
            error(format!(
                "operation {} is `{}`, not a materialised attention",
                at.index(),
                node.op
            ))
        })?;
        let [ctx, probs] = node.outputs[..] else {
            return Err(error(
                "an attention writes its context and probabilities".into(),
            ));
        };
        // Its backward: the one other reader of the probabilities.
        let readers: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| i != at.index() && self.nodes[i].inputs.contains(&probs))
            .collect();
        let backward = match readers[..] {
            [] => None,
            [i] if matches!(
                self.nodes[i].op,
                Op::AttentionGrad { .. } | Op::AttentionSeparateGrad { .. }
            ) =>
            {
                Some(i)
            }
            _ => {
                return Err(error(format!(
                    "`{}` is read by {} operations besides the attention's backward",
                    self.tensor(probs).name,
                    readers.len()
                )));
            }
        };
        let name = {
            let old = &self.tensor(probs).name;
            let stem = old.strip_suffix(".probs").unwrap_or(old);
            format!("{stem}.lse")
        };
        if self.find(&name).is_some() {
            return Err(GraphError::DuplicateName(name));
        }
        let t = &mut self.tensors[probs.index()];
        t.name = name;
        t.axes.truncate(3);
        t.elem = ElemType::F32;
        let forward = Op::FusedAttention(params);
        self.check_operands(forward, &node.inputs, &node.outputs)?;
        self.nodes[at.index()].op = forward;
        if let Some(i) = backward {
            // The projections and the mask: the forward's inputs.
            let mut inputs: Vec<TensorId> = node.inputs.clone();
            let old = &self.nodes[i];
            let dout = old
                .op
                .input_roles()
                .iter()
                .position(|r| *r == "dout")
                .and_then(|k| old.inputs.get(k).copied())
                .ok_or_else(|| error("the attention's backward reads no `dout`".into()))?;
            inputs.extend([ctx, probs, dout]);
            let op = Op::FusedAttentionGrad(params);
            let outputs = self.nodes[i].outputs.clone();
            self.check_operands(op, &inputs, &outputs)?;
            self.nodes[i] = super::Node {
                op,
                inputs,
                outputs,
            };
        }
        Ok(())
    }
}

/// The fused twin of a materialised attention forward, `None` for any other operation.
fn fused_params(op: Op) -> Option<FusedAttention> {
    match op {
        Op::Attention {
            heads,
            kv_heads,
            causal,
        } => Some(FusedAttention {
            heads,
            kv_heads,
            causal,
            separate: false,
            padded: false,
        }),
        Op::AttentionSeparate {
            heads,
            kv_heads,
            causal,
            padded,
        } => Some(FusedAttention {
            heads,
            kv_heads,
            causal,
            separate: true,
            padded,
        }),
        _ => None,
    }
}
