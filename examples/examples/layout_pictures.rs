//! Pictures of R-Tile layouts: where every element of a tensor lives.
//!
//! Builds three small R-Tile tensors and draws each with [`fblayout_core::print`]: the text
//! grid of offsets and the physical map go to standard output, and an SVG picture of each
//! goes to the output directory (`--out DIR`, default `target/layout-pictures`):
//!
//! - `rtile.svg`: an 8 × 8 activation `x`, reduced over `cols` forward and `rows` backward,
//!   stored as four 4 × 4 tiles, each 16 contiguous elements with `cols` innermost;
//! - `rtile_transposed.svg`: the transposed view `xt` of the same buffer. Its cells carry the
//!   same tile colours at the same offsets: the transpose reads the same tiles, with no copy;
//! - `rtile_padded.svg`: a 6 × 10 tensor in 4 × 4 tiles, padded to 8 × 12, whose padding is
//!   hatched in the physical panel.
//!
//! ```text
//! cargo run -p fblayout-examples --example layout_pictures -- --out pictures
//! ```

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use clap::Parser;
use fblayout_core::layout::{BoundView, LayoutSpec, TensorLayout};
use fblayout_core::print::{TileShading, grid, physical_map, svg};

/// Draw R-Tile layouts as text and SVG.
#[derive(Debug, Parser)]
struct Args {
    /// The directory the SVG pictures are written to (created if missing).
    #[arg(long, default_value = "target/layout-pictures")]
    out: PathBuf,
}

/// A failure, reported as its message (`main` prints the `Debug` form of an error).
struct Failure(String);

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Wraps any error with what was being done.
fn context<E: fmt::Display>(what: impl fmt::Display) -> impl FnOnce(E) -> Failure {
    move |e| Failure(format!("{what}: {e}"))
}

fn main() -> Result<(), Failure> {
    let args = Args::parse();
    fs::create_dir_all(&args.out).map_err(context(format!("creating {}", args.out.display())))?;

    // An 8 × 8 activation: forward reduces `cols` (LayerNorm), backward reduces `rows`.
    let x = LayoutSpec::new("x")
        .axis("rows", 8)
        .axis("cols", 8)
        .rtile()
        .reduce_forward(["cols"])
        .reduce_backward(["rows"])
        .build()
        .map_err(context("building layout `x`"))?;
    let plain = x.view().bind(&[]).map_err(context("binding `x`"))?;
    let transposed = x
        .view()
        .named("xt")
        .and_then(|v| v.transpose("rows", "cols"))
        .and_then(|v| v.bind(&[]))
        .map_err(context("building the transposed view `xt`"))?;

    // 6 × 10 in 4 × 4 tiles: both axes padded, to 8 × 12.
    let p = fblayout_tests::catalog::padded_rtile("p").map_err(context("building layout `p`"))?;
    let padded = p.view().bind(&[]).map_err(context("binding `p`"))?;

    for (file, view, layout) in [
        ("rtile.svg", &plain, &x),
        ("rtile_transposed.svg", &transposed, &x),
        ("rtile_padded.svg", &padded, &p),
    ] {
        show(view, layout)?;
        let path = args.out.join(file);
        write_picture(&path, view, layout)?;
        println!("wrote {}\n", path.display());
    }

    // Text grids also draw views of rank 3: split the rows of `x` into blocks of 4.
    let blocks = x
        .view()
        .named("blocks")
        .and_then(|v| v.split("rows", &[("block", None), ("row", Some(4))]))
        .and_then(|v| v.bind(&[]))
        .map_err(context("building the split view `blocks`"))?;
    print!("{}", grid(&blocks).map_err(context("printing `blocks`"))?);
    Ok(())
}

/// Prints the grid of offsets and the physical map of `view`.
fn show(view: &BoundView, layout: &TensorLayout) -> Result<(), Failure> {
    let what = || format!("printing view `{}`", view.name());
    println!("{}", grid(view).map_err(context(what()))?);
    println!("{}", physical_map(view, layout).map_err(context(what()))?);
    Ok(())
}

/// Draws `view`, shaded by the tiles of `layout`, into `path`.
fn write_picture(path: &Path, view: &BoundView, layout: &TensorLayout) -> Result<(), Failure> {
    let picture = svg(view, Some(TileShading::of(layout)))
        .map_err(context(format!("drawing view `{}`", view.name())))?;
    fs::write(path, picture).map_err(context(format!("writing {}", path.display())))
}
