//! A plan drawn as SVG: the graph's operations in execution order, each with its inputs and
//! outputs as chips coloured by layout, and a legend.
//!
//! Each row is one operation — `inputs → op → outputs` — with the pass in the margin and its
//! predicted time at the right; conversions the plan inserted are outlined in red. Every
//! chip names its tensor and, on hover (`<title>`), its layout.

use std::fmt::Write as _;

use super::explain::time;
use super::plan::Plan;
use crate::graph::Op;
use crate::layouts::LayoutChoice;

const ROW: usize = 22;
const CHIP_W: usize = 150;
const OP_W: usize = 140;
const TOP: usize = 56;

/// The fill of a layout.
fn colour(l: LayoutChoice) -> &'static str {
    match l {
        LayoutChoice::RowMajor => "#9ecae1",
        LayoutChoice::ColMajor => "#fdae6b",
        LayoutChoice::RTile(t) if t <= 4 => "#a1d99b",
        LayoutChoice::RTile(_) => "#41ab5d",
    }
}

/// `s` escaped for XML text and attributes.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

impl Plan {
    /// The plan drawn as a standalone SVG document (see the [module docs](self)).
    pub fn svg(&self) -> String {
        let g = &self.graph;
        let widest = g
            .nodes()
            .iter()
            .map(|n| n.inputs.len().max(n.outputs.len()))
            .max()
            .unwrap_or(1);
        let side = widest * (CHIP_W + 4);
        let width = 80 + side + 20 + OP_W + 20 + side + 90;
        let height = TOP + g.nodes().len() * ROW + 20;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace" font-size="10">"#
        );
        let _ = writeln!(
            s,
            r#"<text x="8" y="16" font-size="13">{} plan: {} predicted</text>"#,
            self.strategy,
            escape(&time(self.cost))
        );
        let mut legend: Vec<LayoutChoice> = self.layouts.clone();
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
        let chip = |s: &mut String, x: usize, y: usize, t: crate::graph::TensorId| {
            let tensor = g.tensor(t);
            let l = self.layout(t);
            let mut label = tensor.name.clone();
            if label.chars().count() > 22 {
                label = format!(
                    "…{}",
                    label
                        .chars()
                        .rev()
                        .take(21)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<String>()
                );
            }
            let _ = writeln!(
                s,
                r##"<g><title>{} — {}</title><rect x="{x}" y="{y}" width="{CHIP_W}" height="16" rx="3" fill="{}" stroke="#555"/><text x="{}" y="{}">{}</text></g>"##,
                escape(&tensor.name),
                escape(&l.to_string()),
                colour(l),
                x + 3,
                y + 12,
                escape(&label)
            );
        };
        let op_x = 80 + side + 20;
        for (i, node) in g.nodes().iter().enumerate() {
            let y = TOP + i * ROW;
            let pass = format!("{:?}", node.op.phase()).to_lowercase();
            let _ = writeln!(
                s,
                r##"<text x="8" y="{}" fill="#777">{pass}</text>"##,
                y + 12
            );
            for (k, &t) in node.inputs.iter().enumerate() {
                let x = op_x - 20 - (node.inputs.len() - k) * (CHIP_W + 4);
                chip(&mut s, x, y, t);
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
                chip(&mut s, op_x + OP_W + 20 + k * (CHIP_W + 4), y, t);
            }
            let cost = self.node_costs.get(i).copied().unwrap_or(0.0);
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" fill="#555">{}</text>"##,
                width - 86,
                y + 12,
                escape(&time(cost))
            );
        }
        s.push_str("</svg>\n");
        s
    }
}
