//! Snapshots of what the derives expand to, and of the WGSL they embed.
//!
//! Each declaration is expanded with the same function the proc macro calls, pretty-printed with
//! prettyplease and compared with the committed snapshot under `src/snapshots/`. The WGSL is
//! validated with naga again before it is snapshotted: a snapshot of invalid WGSL would be
//! worthless.

use fblayout_core::shader::WgslModule;
use syn::parse_quote;

use crate::check::check;
use crate::ctxt::Ctxt;
use crate::generate::{expand_axis, expand_tensor};
use crate::parse::Input;

/// The expansion of `input`, pretty-printed.
fn pretty(tokens: proc_macro2::TokenStream) -> String {
    let file: syn::File = syn::parse2(tokens).expect("an expansion parses as items");
    prettyplease::unparse(&file)
}

/// The WGSL of a valid declaration, validated again, and checked to be what the expansion embeds.
fn wgsl(input: &syn::DeriveInput) -> String {
    let cx = Ctxt::new();
    let parsed = Input::parse(&cx, input).expect("a struct with named fields");
    let model = check(&cx, &parsed);
    cx.check().expect("the declaration is valid");
    let source = model
        .expect("a valid declaration has a model")
        .descriptor
        .wgsl()
        .to_owned();
    let module =
        WgslModule::validate("snapshot", source.as_str()).expect("the embedded WGSL is valid");
    let expansion = expand_tensor(input).to_string();
    let literal = proc_macro2::Literal::string(module.source()).to_string();
    assert!(
        expansion.contains(&literal),
        "the expansion embeds the validated WGSL"
    );
    source
}

/// The messages of the errors `input` gives, checked to give no model.
fn errors_of(input: &syn::DeriveInput) -> Vec<String> {
    let cx = Ctxt::new();
    let parsed = Input::parse(&cx, input).expect("a struct");
    assert!(check(&cx, &parsed).is_none());
    cx.check()
        .expect_err("errors")
        .into_iter()
        .map(|e| e.to_string())
        .collect()
}

fn row_major() -> syn::DeriveInput {
    parse_quote! {
        /// A 3×4 matrix, row-major.
        #[derive(Clone, Copy, Tensor)]
        #[tensor(elem = f32)]
        pub struct M {
            #[axis(3)]
            pub row: Ix<Row>,
            #[axis(4)]
            pub col: Ix<Col>,
        }
    }
}

fn activations() -> syn::DeriveInput {
    parse_quote! {
        /// Activations [batch, seq, hidden] in R-Tile.
        #[derive(Clone, Copy, Tensor)]
        #[tensor(layout = rtile, elem = f32, reduce(forward = [hidden], backward = [batch, seq]))]
        #[tensor(view(
            XT = permute(hidden, seq, batch),
            XH = split(hidden => heads: Heads = 4, head_dim: HeadDim = _),
            Tokens = merge(batch, seq => token: Token),
        ))]
        pub struct X {
            #[axis(dyn)]
            pub batch: Ix<Batch>,
            #[axis(dyn, tile = 4)]
            pub seq: Ix<Seq>,
            #[axis(32, tile = 4)]
            pub hidden: Ix<Hidden>,
        }
    }
}

fn weights() -> syn::DeriveInput {
    parse_quote! {
        #[derive(Clone, Copy, Tensor)]
        #[tensor(layout = rtile, reduce(forward = input, backward = output))]
        #[tensor(view(WT = transpose(input, output), Head = [slice(output, 0..8), broadcast(rep: Rep = 2, at = 0)]))]
        pub(crate) struct W {
            #[axis(32, tile = 4)]
            input: Ix<In>,
            #[axis(36, tile = 8, pad)]
            output: Ix<Out>,
        }
    }
}

#[test]
fn expansion_row_major() {
    insta::assert_snapshot!(pretty(expand_tensor(&row_major())));
}

#[test]
fn expansion_rtile_with_views() {
    insta::assert_snapshot!(pretty(expand_tensor(&activations())));
}

#[test]
fn expansion_static_padded() {
    insta::assert_snapshot!(pretty(expand_tensor(&weights())));
}

#[test]
fn expansion_axis() {
    let input: syn::DeriveInput = parse_quote! {
        #[derive(Clone, Copy, Axis)]
        pub struct Seq;
    };
    insta::assert_snapshot!(pretty(expand_axis(&input)));
}

#[test]
fn wgsl_row_major() {
    insta::assert_snapshot!(wgsl(&row_major()));
}

#[test]
fn wgsl_rtile_with_views() {
    insta::assert_snapshot!(wgsl(&activations()));
}

#[test]
fn wgsl_static_padded() {
    insta::assert_snapshot!(wgsl(&weights()));
}

/// Every problem is reported at once, each at its own tokens, with stubs after the errors.
#[test]
fn errors_accumulate() {
    let input: syn::DeriveInput = parse_quote! {
        #[derive(Clone, Copy, Tensor)]
        #[tensor(layout = rtile, elem = f64, colour = red, reduce(forward = [hidden, heads]))]
        #[tensor(view(XT = permute(hidden, hidden), Q = split(hidden => a: A = 5, b: B = 7)))]
        pub struct X {
            #[axis(dyn, 768)]
            pub seq: Ix<Seq>,
            #[axis(30, tile = 4)]
            pub hidden: Ix<Hidden>,
            #[axis(8)]
            pub other: Ix<Seq>,
        }
    };
    let messages = errors_of(&input);
    let expected = [
        "unknown tensor attribute `colour`",
        "axis `seq` already has extent `dyn`",
        "axis type `Seq` is already the type of field `seq`",
        "forward reduction names axis `heads`",
        "element type f64",
        "tile 4 does not divide extent 30",
    ];
    for want in expected {
        assert!(
            messages.iter().any(|m| m.contains(want)),
            "missing {want:?} in {messages:#?}"
        );
    }
    insta::assert_snapshot!(pretty(expand_tensor(&input)));
}

/// View errors are reported once the layout is valid, one per view.
#[test]
fn view_errors_point_at_steps() {
    let input: syn::DeriveInput = parse_quote! {
        #[derive(Clone, Copy, Tensor)]
        #[tensor(view(XT = permute(hidden, hidden), Q = split(hidden => a: A = 5, b: B = 7), R = transpose(seq, heads)))]
        pub struct X {
            #[axis(dyn)]
            pub seq: Ix<Seq>,
            #[axis(32)]
            pub hidden: Ix<Hidden>,
        }
    };
    let messages = errors_of(&input);
    assert_eq!(messages.len(), 3, "{messages:#?}");
    assert!(
        messages[0].contains("`hidden` is named twice"),
        "{}",
        messages[0]
    );
    assert!(
        messages[1].contains("the parts multiply to 35, not 32"),
        "{}",
        messages[1]
    );
    assert!(
        messages[2].contains("names axis `heads`"),
        "{}",
        messages[2]
    );
}

/// Axes whose names differ only in case would give one constant twice (`SEQ_TILE`): the core
/// refuses the declaration, and the error names both axes.
#[test]
fn constants_clash_when_axis_names_differ_only_in_case() {
    let input: syn::DeriveInput = parse_quote! {
        #[derive(Clone, Copy, Tensor)]
        #[allow(non_snake_case)]
        pub struct X {
            #[axis(4)]
            pub seq: Ix<Seq>,
            #[axis(dyn)]
            pub Seq: Ix<Seq2>,
        }
    };
    let messages = errors_of(&input);
    assert_eq!(
        messages,
        [
            "axis `Seq` gives the constant `SEQ_TILE`, as axis `seq` does; axis names must differ in more than case"
        ]
    );
}
