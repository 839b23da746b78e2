//! The exact optimum of the objective, by variable elimination.
//!
//! The objective is a sum of terms, each a table over the layouts of at most three tensors
//! ([`objective`](super::objective)). Minimising a sum of factors is a dynamic programme
//! over an elimination order: eliminating tensor `v` replaces every factor that mentions it
//! by one factor over their other tensors, `g(rest) = min_v Σ f(v, rest)`, and remembers the
//! minimising `v` for each `rest`. Once every tensor is eliminated the constant left is the
//! optimum, and going back through the order reads the minimising layouts off the stored
//! tables. The order is greedy: next the tensor whose new table is smallest (ties: the
//! lowest index). Tensors with one candidate are constants and take no part. The cost is
//! exponential only in the largest table, which for a transformer's graph (a chain of blocks
//! with residual edges) stays small; a graph that would need more than [`LIMIT`] entries is
//! refused ([`PlanError::TooWide`]).

use super::PlanError;
use super::objective::Objective;

/// The most entries the solver keeps in one table.
pub const LIMIT: u128 = 1 << 22;

/// A factor: a table over `vars` (mixed radix, last fastest).
struct Factor {
    vars: Vec<usize>,
    table: Vec<f64>,
}

/// What eliminating one tensor left for the way back.
struct Step {
    var: usize,
    rest: Vec<usize>,
    argmin: Vec<u8>,
}

/// The assignment (candidate index per tensor) minimising the objective.
pub(crate) fn solve(objective: &Objective<'_>) -> Result<Vec<u8>, PlanError> {
    let n = objective.graph.tensors().len();
    let arity: Vec<usize> = (0..n).map(|t| objective.arity(t)).collect();
    let free = |t: usize| arity[t] > 1;
    // The terms as factors over their tensors with more than one candidate.
    let mut factors: Vec<Option<Factor>> = Vec::new();
    let mut scratch = vec![0u8; n];
    for term in &objective.terms {
        let vars: Vec<usize> = term.scope.iter().copied().filter(|&t| free(t)).collect();
        let size: usize = vars.iter().map(|&v| arity[v]).product();
        let table = (0..size)
            .map(|e| {
                decode(e, &vars, &arity, &mut scratch);
                objective.at(term, &scratch)
            })
            .collect();
        factors.push(Some(Factor { vars, table }));
    }
    let mut containing: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, f) in factors.iter().enumerate() {
        for &v in &f.as_ref().expect("just built").vars {
            containing[v].push(i);
        }
    }
    let mut steps = Vec::new();
    let mut remaining: Vec<usize> = (0..n).filter(|&t| free(t)).collect();
    while !remaining.is_empty() {
        // The tensor whose elimination makes the smallest table.
        let (pick, rest, entries) = remaining
            .iter()
            .map(|&v| {
                let rest = neighbours(v, &containing, &factors);
                let entries: u128 = rest.iter().map(|&r| arity[r] as u128).product();
                (v, rest, entries)
            })
            .min_by_key(|(v, _, entries)| (*entries, *v))
            .expect("not empty");
        if entries > LIMIT {
            return Err(PlanError::TooWide {
                at: objective.graph.tensors()[pick].name.clone(),
                tensors: rest.len(),
                entries,
                limit: LIMIT,
            });
        }
        let used: Vec<Factor> = containing[pick]
            .iter()
            .filter_map(|&i| factors[i].take())
            .collect();
        let size = entries as usize;
        let mut table = Vec::with_capacity(size);
        let mut argmin = Vec::with_capacity(size);
        for e in 0..size {
            decode(e, &rest, &arity, &mut scratch);
            let mut best = (f64::INFINITY, 0u8);
            for c in 0..arity[pick] {
                scratch[pick] = c as u8;
                let sum: f64 = used
                    .iter()
                    .map(|f| f.table[index(&f.vars, &arity, &scratch)])
                    .sum();
                if sum < best.0 {
                    best = (sum, c as u8);
                }
            }
            table.push(best.0);
            argmin.push(best.1);
        }
        let id = factors.len();
        for &r in &rest {
            containing[r].push(id);
        }
        factors.push(Some(Factor {
            vars: rest.clone(),
            table,
        }));
        remaining.retain(|&v| v != pick);
        steps.push(Step {
            var: pick,
            rest,
            argmin,
        });
    }
    let mut assignment = vec![0u8; n];
    for step in steps.iter().rev() {
        assignment[step.var] = step.argmin[index(&step.rest, &arity, &assignment)];
    }
    Ok(assignment)
}

/// The other tensors of the live factors that mention `v`, sorted.
fn neighbours(v: usize, containing: &[Vec<usize>], factors: &[Option<Factor>]) -> Vec<usize> {
    let mut rest: Vec<usize> = containing[v]
        .iter()
        .filter_map(|&i| factors[i].as_ref())
        .flat_map(|f| f.vars.iter().copied())
        .filter(|&x| x != v)
        .collect();
    rest.sort_unstable();
    rest.dedup();
    rest
}

/// Writes entry `e` of a table over `vars` into `assignment`.
fn decode(mut e: usize, vars: &[usize], arity: &[usize], assignment: &mut [u8]) {
    for &v in vars.iter().rev() {
        assignment[v] = (e % arity[v]) as u8;
        e /= arity[v];
    }
}

/// The entry of a table over `vars` at `assignment`.
fn index(vars: &[usize], arity: &[usize], assignment: &[u8]) -> usize {
    vars.iter()
        .fold(0, |acc, &v| acc * arity[v] + usize::from(assignment[v]))
}
