//! A plan drawn as SVG.
//!
//! Two drawings share one vocabulary (a chip per tensor, coloured by its layout; conversions the
//! plan inserted outlined in red; on hover (`<title>`), a chip names its tensor and layout):
//!
//! - [`Plan::svg`], the overview: the first block's operations drawn in full, then one strip
//!   per block (and one for everything outside the blocks) with a cell per tensor, so that a
//!   whole model's layouts and conversions fit on one screen;
//! - [`Plan::svg_table`], every operation of the step in execution order, one row each —
//!   `inputs → op → outputs`, with the phase in the margin and its predicted time at the right.

use std::fmt::Write as _;

use super::explain::time;
use super::plan::Plan;
use crate::graph::{Op, TensorId};
use crate::layouts::LayoutChoice;

/// The height of one operation's row.
pub(super) const ROW: usize = 22;
const CHIP_W: usize = 150;
const OP_W: usize = 140;

/// The fill of a layout.
pub(super) fn colour(l: LayoutChoice) -> &'static str {
    match l {
        LayoutChoice::RowMajor => "#9ecae1",
        LayoutChoice::ColMajor => "#fdae6b",
        LayoutChoice::RTile(t) if t <= 4 => "#a1d99b",
        LayoutChoice::RTile(_) => "#41ab5d",
    }
}

/// `s` escaped for XML text and attributes.
pub(super) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The pixels between a drawing's top and its first row.
pub(super) const TOP: usize = 56;

/// The SVG document's opening tag, title line and legend of the layouts `plan` uses.
pub(super) fn header(s: &mut String, plan: &Plan, width: usize, height: usize, what: &str) {
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="10">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="8" y="16" font-size="13">{} plan: {} predicted{}</text>"#,
        plan.strategy,
        escape(&time(plan.cost)),
        escape(what)
    );
    let mut legend: Vec<LayoutChoice> = plan.layouts.clone();
    legend.sort();
    legend.dedup();
    for (i, l) in legend.iter().enumerate() {
        let x = 8 + i * 130;
        let _ = writeln!(
            s,
            r##"<rect x="{x}" y="26" width="14" height="12" fill="{}" stroke="#555"/><text x="{}" y="36">{}</text>"##,
            colour(*l),
            x + 18,
            escape(&l.to_string())
        );
    }
}

/// The hover text of tensor `t`'s chip or cell: its name and layout.
pub(super) fn title(plan: &Plan, t: TensorId) -> String {
    format!("{} — {}", plan.graph.tensor(t).name, plan.layout(t))
}

/// The width of a drawing whose rows have at most `widest` chips on a side.
pub(super) fn rows_width(widest: usize) -> usize {
    let side = widest * (CHIP_W + 4);
    80 + side + 20 + OP_W + 20 + side + 90
}

/// The most inputs or outputs of any of `nodes`.
pub(super) fn widest(plan: &Plan, nodes: &[usize]) -> usize {
    nodes
        .iter()
        .map(|&i| {
            let n = &plan.graph.nodes()[i];
            n.inputs.len().max(n.outputs.len())
        })
        .max()
        .unwrap_or(1)
        .max(1)
}

/// Draws `nodes` (indices in execution order) as rows from `top`, `widest` chips a side, in a
/// drawing `width` wide.
pub(super) fn rows(
    s: &mut String,
    plan: &Plan,
    nodes: &[usize],
    top: usize,
    widest: usize,
    width: usize,
) {
    let g = &plan.graph;
    let side = widest * (CHIP_W + 4);
    let chip = |s: &mut String, x: usize, y: usize, t: TensorId| {
        let tensor = g.tensor(t);
        let l = plan.layout(t);
        let mut label = tensor.name.clone();
        if label.chars().count() > 22 {
            let tail: Vec<char> = label.chars().rev().take(21).collect();
            label = format!("…{}", tail.into_iter().rev().collect::<String>());
        }
        let _ = writeln!(
            s,
            r##"<g><title>{}</title><rect x="{x}" y="{y}" width="{CHIP_W}" height="16" rx="3" fill="{}" stroke="#555"/><text x="{}" y="{}">{}</text></g>"##,
            escape(&title(plan, t)),
            colour(l),
            x + 3,
            y + 12,
            escape(&label)
        );
    };
    let op_x = 80 + side + 20;
    for (row, &i) in nodes.iter().enumerate() {
        let node = &g.nodes()[i];
        let y = top + row * ROW;
        let phase = format!("{:?}", node.op.phase()).to_lowercase();
        let _ = writeln!(
            s,
            r##"<text x="8" y="{}" fill="#777">{phase}</text>"##,
            y + 12
        );
        for (k, &t) in node.inputs.iter().enumerate() {
            let x = op_x - 20 - (node.inputs.len() - k) * (CHIP_W + 4);
            chip(s, x, y, t);
        }
        let convert = matches!(node.op, Op::Convert { .. });
        let stroke = if convert { "#d62728" } else { "#333" };
        let _ = writeln!(
            s,
            r##"<rect x="{op_x}" y="{y}" width="{OP_W}" height="16" rx="8" fill="#f7f7f7" stroke="{stroke}" stroke-width="{}"/><text x="{}" y="{}">{}</text>"##,
            if convert { 2 } else { 1 },
            op_x + 6,
            y + 12,
            escape(node.op.name())
        );
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{}" x2="{op_x}" y2="{}" stroke="#999"/><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>"##,
            op_x - 20,
            y + 8,
            y + 8,
            op_x + OP_W,
            y + 8,
            op_x + OP_W + 20,
            y + 8
        );
        for (k, &t) in node.outputs.iter().enumerate() {
            chip(s, op_x + OP_W + 20 + k * (CHIP_W + 4), y, t);
        }
        let cost = plan.node_costs.get(i).copied().unwrap_or(0.0);
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#555">{}</text>"##,
            width - 86,
            y + 12,
            escape(&time(cost))
        );
    }
}

impl Plan {
    /// Every operation of the step drawn as a row, in execution order, as a standalone SVG
    /// document (see the [module docs](self)). For a whole model this is tall; [`Plan::svg`]
    /// is the overview.
    pub fn svg_table(&self) -> String {
        let nodes: Vec<usize> = (0..self.graph.nodes().len()).collect();
        let widest = widest(self, &nodes);
        let width = rows_width(widest);
        let height = TOP + nodes.len() * ROW + 20;
        let mut s = String::new();
        header(&mut s, self, width, height, "");
        rows(&mut s, self, &nodes, TOP, widest, width);
        s.push_str("</svg>\n");
        s
    }
}
