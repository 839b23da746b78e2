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
use fblayout_core::wgsl::WgslModule;

use crate::runtime::{Binding, Gpu, GpuBuffer, GpuError};

/// The gather entry point's name.
pub const GATHER_ENTRY: &str = "fblayout_gather_main";
const WORKGROUP_SIZE: u32 = 256;

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
        if elem.size_bytes() != 4 {
            return Err(GpuError::bad_input(
                format!("gather of `{}`", view.name()),
                format!("elements of type {elem} are not 32-bit words"),
            ));
        }
        Self::with_index_fn(&view.index_fn().simplified(), bound)
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
        let entry = entry_point(f, bound.shape(), bound.extent_args());
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
        let what = || format!("gather `{}`", self.module.name());
        if src.len_bytes() < self.source_len * 4 {
            return Err(GpuError::bad_input(
                what(),
                format!(
                    "the source holds {} bytes; the layout needs {}",
                    src.len_bytes(),
                    self.source_len * 4
                ),
            ));
        }
        if dst.len_bytes() < self.elements * 4 {
            return Err(GpuError::bad_input(
                what(),
                format!(
                    "the destination holds {} bytes; the view has {} elements",
                    dst.len_bytes(),
                    self.elements
                ),
            ));
        }
        let workgroups = self.elements.div_ceil(u64::from(WORKGROUP_SIZE)) as u32;
        let bindings = [Binding::new(0, src), Binding::new(1, dst)];
        gpu.dispatch_linear(&self.module, GATHER_ENTRY, &bindings, workgroups)
            .map(|_| ())
    }
}

/// The compute entry point: one invocation per element of the view.
fn entry_point(f: &ValidIndexFn, shape: &[u64], extent_args: &[u64]) -> String {
    let mut s = String::new();
    let total: u64 = shape.iter().product();
    let _ = write!(
        s,
        "\n@group(0) @binding(0) var<storage, read> gather_src: array<u32>;\n\
         @group(0) @binding(1) var<storage, read_write> gather_dst: array<u32>;\n\n\
         @compute @workgroup_size({WORKGROUP_SIZE})\n\
         fn {GATHER_ENTRY}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, \
         @builtin(local_invocation_index) lid: u32) {{\n\
         \x20   let i = (wg.x + wg.y * nwg.x) * {WORKGROUP_SIZE}u + lid;\n\
         \x20   if (i >= {total}u) {{\n        return;\n    }}\n\
         \x20   var rest = i;\n"
    );
    for d in (1..shape.len()).rev() {
        let _ = writeln!(
            s,
            "    let c{d} = rest % {}u;\n    rest = rest / {}u;",
            shape[d], shape[d]
        );
    }
    if !shape.is_empty() {
        s.push_str("    let c0 = rest;\n");
    }
    let args: Vec<String> = (0..shape.len())
        .map(|d| format!("c{d}"))
        .chain(extent_args.iter().map(|e| format!("{e}u")))
        .collect();
    let _ = writeln!(
        s,
        "    gather_dst[i] = gather_src[{}({})];\n}}",
        f.offset_fn_name(),
        args.join(", ")
    );
    s
}
