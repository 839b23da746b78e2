//! Gather: materialise a view as a dense row-major tensor.
//!
//! Views are index maps, so kernels normally read through them and never copy. When a dense
//! copy *is* wanted (handing data to code that knows no layouts, or exporting a checkpoint),
//! [`Gather`] writes `dst[i] = src[offset(coords(i))]` for every element of the view, where
//! `coords(i)` is the row-major coordinate of `i` and `offset` is the view's emitted WGSL
//! index function. The view's shape and run-time extents are baked into the shader as
//! constants, so the coordinate decode compiles to shifts (or multiply-high for other sizes).
//! It is also the benchmark of the index code itself: its cost over a plain copy is what the
//! index arithmetic and the access pattern cost.
//!
//! Elements are moved as 32-bit words, so any 32-bit element type (`f32`, `u32`, `i32`) works.

use std::fmt::Write as _;

use fblayout_core::emit::wgsl::emit_module;
use fblayout_core::expr::ValidIndexFn;
use fblayout_core::layout::{BoundView, View};
use fblayout_core::shader::WgslModule;

use crate::entry_point::{Access, LinearEntry, storage_array, workgroups};
use crate::runtime::{Binding, Gpu, GpuBuffer, GpuError};

/// The gather entry point's name.
pub const GATHER_ENTRY: &str = "fblayout_gather_main";
/// The bytes of one element: the gather moves 32-bit words.
const WORD_BYTES: u64 = 4;
/// The source buffer: the tensor's physical buffer.
const SRC: &str = "fblayout_gather_src";
/// The destination buffer: the view, dense and row-major.
const DST: &str = "fblayout_gather_dst";

/// A compiled gather for one view at one set of extents.
#[derive(Debug, Clone)]
pub struct Gather {
    module: WgslModule,
    elements: u64,
    source_len: u64,
}

impl Gather {
    /// The gather of `view`, bound as `bound`, through its simplified index function.
    pub fn new(view: &View, bound: &BoundView) -> Result<Self, GpuError> {
        let elem = view.layout().elem();
        if u64::from(elem.size_bytes()) != WORD_BYTES {
            return Err(GpuError::bad_input(
                format!("gather of `{}`", view.name()),
                format!("elements of type {elem} are not 32-bit words"),
            ));
        }
        Self::with_index_fn(view.simplified_fn(), bound)
    }

    /// The gather of `bound` through `f` (the simplified index function, or any other form of
    /// it, for comparisons).
    pub fn with_index_fn(f: &ValidIndexFn, bound: &BoundView) -> Result<Self, GpuError> {
        let what = || format!("gather of `{}`", f.name);
        if f.coord_count() != bound.shape().len() {
            return Err(GpuError::bad_input(
                what(),
                format!(
                    "the index function takes {} coordinates, the view has rank {}",
                    f.coord_count(),
                    bound.shape().len()
                ),
            ));
        }
        let elements = bound.logical_len();
        if elements > u64::from(u32::MAX) {
            return Err(GpuError::bad_input(
                what(),
                format!("{elements} elements exceed the u32 index space"),
            ));
        }
        let functions = emit_module(&f.name, &[f])?;
        let entry = entry_point(f, bound.shape(), bound.extent_args(), elements);
        let module = functions.extend(format!("{}+gather", f.name), &entry, Default::default())?;
        Ok(Self {
            module,
            elements,
            source_len: bound.len(),
        })
    }

    /// The number of elements written.
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// The validated shader.
    pub fn module(&self) -> &WgslModule {
        &self.module
    }

    /// Submits the gather from `src` (the tensor's physical buffer) into `dst` (dense,
    /// row-major over the view's shape). Does not wait; read `dst` back or call
    /// [`Gpu::wait`].
    pub fn run(&self, gpu: &Gpu, src: &GpuBuffer, dst: &GpuBuffer) -> Result<(), GpuError> {
        let what = format!("gather `{}`", self.module.name());
        check_words(&what, "the source", src, self.source_len)?;
        check_words(&what, "the destination", dst, self.elements)?;
        let bindings = [Binding::new(0, src), Binding::new(1, dst)];
        // `new` keeps the elements inside the u32 index space.
        let workgroups = workgroups(self.elements)
            .ok_or_else(|| GpuError::bad_input(what, "the elements exceed the u32 index space"))?;
        gpu.dispatch_linear(&self.module, GATHER_ENTRY, &bindings, workgroups)
            .map(|_| ())
    }
}

/// Fails when `buffer` (`role`, in `what`) holds fewer than `words` 32-bit words.
fn check_words(what: &str, role: &str, buffer: &GpuBuffer, words: u64) -> Result<(), GpuError> {
    let needed = words * WORD_BYTES;
    if buffer.len_bytes() < needed {
        return Err(GpuError::bad_input(
            what,
            format!(
                "{role} holds {} bytes; the gather needs {needed} ({words} 32-bit words)",
                buffer.len_bytes()
            ),
        ));
    }
    Ok(())
}

/// The compute entry point: one invocation per element of the view, `elements` in all.
fn entry_point(f: &ValidIndexFn, shape: &[u64], extent_args: &[u64], elements: u64) -> String {
    let entry = LinearEntry {
        name: GATHER_ENTRY,
        prefix: "fblayout_gather",
    };
    let constants =
        |values: &[u64]| -> Vec<String> { values.iter().map(|v| format!("{v}u")).collect() };
    let mut s = String::from("\n");
    s += &storage_array(0, Access::Read, SRC);
    s += &storage_array(1, Access::ReadWrite, DST);
    s.push('\n');
    s += &entry.open(&format!("{elements}u"));
    s += &entry.decode(&constants(shape));
    let args = entry.arguments(shape.len(), &constants(extent_args));
    let i = entry.index();
    let _ = writeln!(
        s,
        "    {DST}[{i}] = {SRC}[{}({args})];\n}}",
        f.offset_fn_name()
    );
    s
}
