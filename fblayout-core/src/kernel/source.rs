//! Putting a kernel's shader together: operands, parameters and body, validated as one module.

use std::fmt::Write as _;

use super::error::KernelError;
use super::operand::{Access, Operand};
use super::params::{ParamsLayout, Scalar};
use crate::ident::ident_problem;
use crate::layout::{ElemType, View};
use crate::shader::{WgslFeatures, WgslModule};

/// The name of the kernel's uniform parameter block in its WGSL.
pub const PARAMS: &str = "params";

/// A kernel's shader before validation: operands, scalar parameters, optional features and a
/// WGSL body (entry points and helpers) that uses what the operands declare.
#[derive(Debug, Clone)]
pub struct KernelSource {
    name: String,
    operands: Vec<Operand>,
    scalars: Vec<(String, Scalar)>,
    features: WgslFeatures,
    body: String,
}

/// Where an operand is bound in a built kernel.
#[derive(Debug, Clone)]
pub struct Slot {
    /// The operand's role.
    pub role: String,
    /// Its `@binding` in `@group(0)`.
    pub binding: u32,
    /// Read, or read and written.
    pub access: Access,
    /// The axis of its wide accesses, if it has them (its buffer is then bound as `vec4`s).
    pub vector: Option<usize>,
    /// The element type of its buffer.
    pub elem: ElemType,
    /// The view it is read through.
    pub view: View,
}

/// A kernel's validated shader with the binding of every operand and the layout of its
/// parameter block.
#[derive(Debug, Clone)]
pub struct KernelModule {
    module: WgslModule,
    slots: Vec<Slot>,
    params: Option<ParamsLayout>,
    features: WgslFeatures,
}

impl KernelSource {
    /// An empty kernel named `name` (the name appears in errors and labels).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            operands: Vec::new(),
            scalars: Vec::new(),
            features: WgslFeatures::default(),
            body: String::new(),
        }
    }

    /// Adds an operand; operands are bound in the order they are added.
    pub fn operand(mut self, operand: Operand) -> Self {
        self.operands.push(operand);
        self
    }

    /// Adds a scalar parameter, `params.<name>` in the body.
    pub fn scalar(mut self, name: impl Into<String>, scalar: Scalar) -> Self {
        self.scalars.push((name.into(), scalar));
        self
    }

    /// Allows optional WGSL features (`f16` is turned on by itself when an operand stores
    /// `f16`, and must then be allowed here).
    pub fn features(mut self, features: WgslFeatures) -> Self {
        self.features = features;
        self
    }

    /// Appends WGSL to the body.
    pub fn body(mut self, wgsl: impl AsRef<str>) -> Self {
        self.body.push_str(wgsl.as_ref());
        if !self.body.ends_with('\n') {
            self.body.push('\n');
        }
        self
    }

    /// The operands so far.
    pub fn operands(&self) -> &[Operand] {
        &self.operands
    }

    /// The operand with role `role`.
    pub fn get(&self, role: &str) -> Option<&Operand> {
        self.operands.iter().find(|o| o.role() == role)
    }

    /// Checks the names, writes the whole shader and validates it with naga.
    pub fn build(&self) -> Result<KernelModule, KernelError> {
        self.check_names()?;
        let uses_f16 = self.operands.iter().any(|o| o.elem() == ElemType::F16);
        for o in &self.operands {
            let why = match o.elem() {
                e if e.wgsl_problem().is_some() => e.wgsl_problem(),
                ElemType::F16 if !self.features.f16 => {
                    Some("f16 storage needs an adapter with SHADER_F16 (WgslFeatures::f16)")
                }
                _ => None,
            };
            if let Some(why) = why {
                return Err(KernelError::ElemType {
                    kernel: self.name.clone(),
                    role: o.role().to_owned(),
                    elem: o.elem(),
                    why,
                });
            }
        }
        let features = WgslFeatures {
            f16: self.features.f16 && uses_f16,
            ..self.features
        };
        let mut s = String::new();
        if features.f16 {
            s.push_str("enable f16;\n");
        }
        if features.cooperative_matrix {
            s.push_str("enable wgpu_cooperative_matrix;\n");
        }
        let _ = writeln!(s, "// Kernel `{}`", self.name);
        let mut params = String::new();
        for o in &self.operands {
            if let Some(ty) = o.extents_type() {
                let layout = o.view().layout();
                s += &layout.extents_struct(&ty);
                // WGSL's uniform rules: a struct member starts on 16 bytes and keeps the next
                // member at least `roundUp(16, size)` bytes away.
                let bytes = 4 * layout.dynamic_axes().count();
                let _ = writeln!(
                    params,
                    "    @align(16) @size({}) {}: {ty},",
                    bytes.div_ceil(16) * 16,
                    o.role()
                );
            }
        }
        for (name, scalar) in &self.scalars {
            let _ = writeln!(params, "    {name}: {},", scalar.wgsl());
        }
        let mut binding = 0;
        if !params.is_empty() {
            let ty = format!("{PARAMS}_block");
            let _ = writeln!(s, "struct {ty} {{\n{params}}}");
            let _ = writeln!(
                s,
                "@group(0) @binding({binding}) var<uniform> {PARAMS}: {ty};\n"
            );
            binding += 1;
        }
        let mut slots = Vec::with_capacity(self.operands.len());
        for o in &self.operands {
            s += &o.wgsl(binding);
            s.push('\n');
            slots.push(Slot {
                role: o.role().to_owned(),
                binding,
                access: o.access(),
                vector: o.vector_axis(),
                elem: o.elem(),
                view: o.view().clone(),
            });
            binding += 1;
        }
        s += &self.body;
        let module = WgslModule::validate_with(self.name.clone(), s, features)?;
        let params = ParamsLayout::from_module(&self.name, module.naga_module(), PARAMS);
        Ok(KernelModule {
            module,
            slots,
            params,
            features,
        })
    }

    fn check_names(&self) -> Result<(), KernelError> {
        let mut names: Vec<&str> = Vec::new();
        let roles = self.operands.iter().map(|o| o.role());
        for name in roles.chain(self.scalars.iter().map(|(n, _)| n.as_str())) {
            if names.contains(&name) {
                return Err(KernelError::DuplicateName {
                    kernel: self.name.clone(),
                    name: name.to_owned(),
                });
            }
            names.push(name);
        }
        for (name, _) in &self.scalars {
            if let Some(why) = ident_problem(name) {
                return Err(KernelError::BadName {
                    kernel: self.name.clone(),
                    name: name.clone(),
                    what: "a scalar parameter",
                    why,
                });
            }
        }
        Ok(())
    }
}

impl KernelModule {
    /// The validated shader.
    pub fn module(&self) -> &WgslModule {
        &self.module
    }

    /// Its WGSL source.
    pub fn source(&self) -> &str {
        self.module.source()
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        self.module.name()
    }

    /// Every operand's binding, in binding order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The binding of the operand with role `role`.
    pub fn slot(&self, role: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| s.role == role)
    }

    /// The parameter block, when the kernel has run-time extents or scalars.
    pub fn params(&self) -> Option<&ParamsLayout> {
        self.params.as_ref()
    }

    /// The optional WGSL features the shader uses.
    pub fn features(&self) -> WgslFeatures {
        self.features
    }
}
