//! Procedural macros of RLX: `#[rlx::model]` and `#[derive(Params)]`.
//!
//! `rlx` re-exports both; users never depend on this crate directly. The generated code
//! names `::rlx::` paths, so it works in any crate that depends on `rlx`.

use proc_macro::TokenStream;
use syn::{DeriveInput, ItemFn, parse_macro_input};

mod model;
mod params;

/// Turns a fn over typed tensor handles into a model type; see `rlx::model`.
#[proc_macro_attribute]
pub fn model(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item = parse_macro_input!(item as ItemFn);
    match model::expand(attr.into(), item.clone()) {
        Ok(tokens) => tokens.into(),
        // Keep the fn (minus the macro's own argument attributes) so that the one error is
        // not followed by unrelated ones about its missing uses.
        Err(e) => {
            let error = e.into_compile_error();
            let item = model::strip_arg_attrs(item);
            quote::quote!(#error #item).into()
        }
    }
}

/// Declares every tensor of a struct as a graph param; see `rlx::params`.
#[proc_macro_derive(Params, attributes(param))]
pub fn derive_params(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    params::derive(input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
