//! Compiles every Rust code block of the fblayout book, and of the README, as doc tests.
//!
//! The book is written in `src/*.md` for mdBook; including each chapter here makes rustdoc
//! compile and run its examples against the real crates, so CI fails when the book drifts
//! from the code.

#[doc = include_str!("../README.md")]
pub mod readme {}

#[doc = include_str!("src/introduction.md")]
pub mod introduction {}

#[doc = include_str!("src/why-layout.md")]
pub mod why_layout {}

#[doc = include_str!("src/declaring.md")]
pub mod declaring {}

#[doc = include_str!("src/rtile.md")]
pub mod rtile {}

#[doc = include_str!("src/views.md")]
pub mod views {}

#[doc = include_str!("src/codegen.md")]
pub mod codegen {}

#[doc = include_str!("src/kernels.md")]
pub mod kernels {}

#[doc = include_str!("src/testing.md")]
pub mod testing {}

#[doc = include_str!("src/operations.md")]
pub mod operations {}

#[doc = include_str!("src/planner.md")]
pub mod planner {}

#[doc = include_str!("src/models.md")]
pub mod models {}

#[doc = include_str!("src/finetuning.md")]
pub mod finetuning {}

#[doc = include_str!("src/architecture.md")]
pub mod architecture {}
