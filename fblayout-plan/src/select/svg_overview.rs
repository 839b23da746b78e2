//! The plan's overview drawing: the first block in full, then a strip per block.
//!
//! A model's blocks repeat, so one of them drawn operation by operation shows what every block
//! does; the strips below show, for every block, the layout each of its tensors got and where
//! the plan converts one, a cell per tensor, so that a 6-block step fits on a screen where
//! [`Plan::svg_table`] runs to thousands of pixels.
//!
//! Which block a tensor belongs to is read from its name: the first dot-separated segment that
//! is a number (`model.layers.3.mlp`, `transformer.h.3.attn`) or `l` and a number (`l3.attn`),
//! after any gradient prefix `d_`. Tensors with no such segment (embeddings, the head, the
//! loss) share the strip "outside the blocks".

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::plan::Plan;
use super::svg::{ROW, TOP, colour, escape, header, rows, rows_width, title, widest};
use crate::graph::{Op, TensorId};

/// One cell's width and the step between cells.
const CELL_W: usize = 8;
const CELL_STEP: usize = CELL_W + 2;
/// A strip's height and the step between strips.
const STRIP_H: usize = 14;
const STRIP_STEP: usize = STRIP_H + 6;
/// Where the cells start, after the strip's label.
const CELLS_X: usize = 150;

/// The block a tensor named `name` belongs to (see the [module docs](self)).
pub(crate) fn block_of(name: &str) -> Option<u32> {
    let mut name = name;
    while let Some(rest) = name.strip_prefix("d_") {
        name = rest;
    }
    name.split('.').find_map(|seg| {
        let digits = seg.strip_prefix('l').unwrap_or(seg);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    })
}

impl Plan {
    /// The plan drawn as a standalone SVG overview: the first block in full, operation by
    /// operation, then a strip per block with a cell per tensor, coloured by the layout it got
    /// and marked where the plan converts it, so that a 6-block step fits on a screen. A
    /// tensor's block is read from its name (the first dot-separated segment that is a number,
    /// or `l` and a number, after any `d_`); the rest share the strip "outside the blocks".
    /// The operation-by-operation table is [`Plan::svg_table`].
    pub fn svg(&self) -> String {
        let g = &self.graph;
        // Every tensor once, in the order the step first touches it, grouped by block.
        let mut seen = vec![false; g.tensors().len()];
        let mut strips: BTreeMap<Option<u32>, Vec<TensorId>> = BTreeMap::new();
        for node in g.nodes() {
            for &t in node.inputs.iter().chain(&node.outputs) {
                if !std::mem::replace(&mut seen[t.index()], true) {
                    strips
                        .entry(block_of(&g.tensor(t).name))
                        .or_default()
                        .push(t);
                }
            }
        }
        let converted: Vec<bool> = {
            let mut c = vec![false; g.tensors().len()];
            for node in g.nodes() {
                if matches!(node.op, Op::Convert { .. }) {
                    for &t in &node.outputs {
                        c[t.index()] = true;
                    }
                }
            }
            c
        };
        // The first block's operations: those whose first output (or input) is in it.
        let first = strips.keys().find_map(|b| *b);
        let block_nodes: Vec<usize> = g
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                let t = n.outputs.first().or(n.inputs.first());
                first.is_some() && t.is_some_and(|&t| block_of(&g.tensor(t).name) == first)
            })
            .map(|(i, _)| i)
            .collect();
        let widest = widest(self, &block_nodes);
        let most_cells = strips.values().map(Vec::len).max().unwrap_or(0);
        let width = rows_width(widest).max(CELLS_X + most_cells * CELL_STEP + 20);
        let table_top = TOP + 20;
        let strips_top = table_top + block_nodes.len() * ROW + 40;
        let height = strips_top + 24 + strips.len() * STRIP_STEP + 20;
        let mut s = String::new();
        header(&mut s, self, width, height, ", overview");
        match first {
            Some(b) => {
                let _ = writeln!(
                    s,
                    r#"<text x="8" y="{}" font-size="12">block {b}, every operation (the other blocks repeat it)</text>"#,
                    TOP + 10
                );
                rows(&mut s, self, &block_nodes, table_top, widest, width);
            }
            None => {
                let _ = writeln!(
                    s,
                    r#"<text x="8" y="{}" font-size="12">no blocks: the graph's tensor names carry no block number</text>"#,
                    TOP + 10
                );
            }
        }
        let _ = writeln!(
            s,
            r#"<text x="8" y="{}" font-size="12">every block: a cell per tensor in the order the step first touches it; red = a conversion the plan inserted</text>"#,
            strips_top + 4
        );
        // Blocks in order, then everything outside them.
        let order = strips
            .iter()
            .filter(|(b, _)| b.is_some())
            .chain(strips.iter().filter(|(b, _)| b.is_none()));
        for (k, (block, tensors)) in order.enumerate() {
            let y = strips_top + 16 + k * STRIP_STEP;
            let label = match block {
                Some(b) => format!("block {b}"),
                None => "outside the blocks".to_owned(),
            };
            let conversions = tensors.iter().filter(|t| converted[t.index()]).count();
            let _ = writeln!(
                s,
                r##"<text x="8" y="{}">{}</text><text x="{}" y="{}" fill="#777">{}</text>"##,
                y + 11,
                escape(&label),
                CELLS_X - 40,
                y + 11,
                conversions
            );
            for (i, &t) in tensors.iter().enumerate() {
                let (stroke, sw) = if converted[t.index()] {
                    ("#d62728", 2)
                } else {
                    ("#555", 1)
                };
                let _ = writeln!(
                    s,
                    r##"<g><title>{}</title><rect x="{}" y="{y}" width="{CELL_W}" height="{STRIP_H}" fill="{}" stroke="{stroke}" stroke-width="{sw}"/></g>"##,
                    escape(&title(self, t)),
                    CELLS_X + i * CELL_STEP,
                    colour(self.layout(t)),
                );
            }
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::block_of;

    #[test]
    fn blocks_are_read_from_hugging_face_and_shipped_names() {
        assert_eq!(block_of("model.layers.3.mlp.up_proj.weight"), Some(3));
        assert_eq!(block_of("transformer.h.11.attn.c_attn.weight"), Some(11));
        assert_eq!(block_of("l2.attn.qkv.w"), Some(2));
        assert_eq!(block_of("d_d_l0.ffn.gelu"), Some(0));
        assert_eq!(block_of("l0.attn.qkv.w.as_rt4.n17"), Some(0));
        assert_eq!(block_of("embed_ln.gamma"), None);
        assert_eq!(block_of("lm_head.w"), None);
        assert_eq!(block_of("logits"), None);
    }
}
