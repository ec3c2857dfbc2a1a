//! `#[derive(Params)]`: one graph param per tensor, named by its field path.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, GenericArgument, LitInt, LitStr, PathArguments, Type};

/// What `#[param(..)]` says about one field.
#[derive(Default)]
struct FieldAttrs {
    rename: Option<LitStr>,
    transpose: bool,
    split: Option<(LitInt, LitInt, Option<syn::Expr>)>,
    len: Option<Type>,
    when: Option<LitStr>,
    skip: bool,
}

pub fn derive(input: DeriveInput) -> syn::Result<TokenStream> {
    let name = &input.ident;
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => named.named.iter().collect::<Vec<_>>(),
            Fields::Unit => Vec::new(),
            Fields::Unnamed(_) => {
                return Err(syn::Error::new(
                    s.fields.span(),
                    "`Params` needs named fields: each field's name is a segment of its weights' names",
                ));
            }
        },
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span,
                "`Params` can only be derived for structs, not enums",
            ));
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span,
                "`Params` can only be derived for structs, not unions",
            ));
        }
    };

    let lifetimes: Vec<_> = input.generics.lifetimes().collect();
    if lifetimes.len() > 1 {
        return Err(syn::Error::new(
            lifetimes[1].span(),
            "a `Params` struct holds tensors of one graph: give it exactly one lifetime, e.g. `struct Weights<'g>`",
        ));
    }
    let brand = lifetimes
        .first()
        .map(|l| l.lifetime.clone())
        .unwrap_or_else(|| syn::Lifetime::new("'g", proc_macro2::Span::call_site()));
    let mut impl_generics_src = input.generics.clone();
    if lifetimes.is_empty() {
        impl_generics_src
            .params
            .insert(0, syn::parse_quote!(#brand));
    }
    let (impl_generics, _, _) = impl_generics_src.split_for_impl();
    let (_, ty_generics, where_clause) = input.generics.split_for_impl();

    let mut inits = Vec::new();
    for field in fields {
        let ident = field.ident.as_ref().expect("named field");
        let attrs = parse_attrs(&field.attrs)?;
        let key = match &attrs.rename {
            Some(lit) => lit.value(),
            None => ident.to_string().trim_start_matches("r#").to_string(),
        };
        let mut path = quote!(__at.field(#key));
        if attrs.transpose {
            path = quote!(#path.transposed());
        }
        if let Some((parts, index, axis)) = &attrs.split {
            let axis = axis.clone().unwrap_or_else(|| syn::parse_quote!(0));
            path = quote!(#path.split(::rlx::params::Split {
                axis: #axis,
                index: #index,
                parts: #parts,
            }));
        }
        let ty = &field.ty;
        let span = ty.span();
        if attrs.skip || type_is(ty, "PhantomData") {
            inits.push(quote_spanned!(span=> #ident: ::core::default::Default::default()));
            continue;
        }
        if let Some(flag) = &attrs.when {
            let Some(inner) = option_element(ty) else {
                return Err(syn::Error::new(
                    flag.span(),
                    "`when` applies only to `Option` fields: the param is `Some` when the config flag is on",
                ));
            };
            if attrs.len.is_some() {
                return Err(syn::Error::new(
                    flag.span(),
                    "`when` and `len` cannot be combined: wrap the `Vec` in a params struct",
                ));
            }
            inits.push(quote_spanned! {span=>
                #ident: if __g.flag(#flag) {
                    ::core::option::Option::Some(<#inner as ::rlx::params::Params<#brand>>::declare(__g, &#path))
                } else {
                    ::core::option::Option::None
                }
            });
            continue;
        }
        let init = match (vec_element(ty), &attrs.len) {
            (Some(elem), Some(len)) => quote_spanned! {span=>
                {
                    let __path = #path;
                    (0..__g.size::<#len>())
                        .map(|__i| <#elem as ::rlx::params::Params<#brand>>::declare(__g, &__path.index(__i)))
                        .collect()
                }
            },
            (Some(_), None) => {
                return Err(syn::Error::new(
                    ty.span(),
                    "a `Vec` of params needs its length: add `#[param(len = Dim)]` with a config dim or `Const<N>`",
                ));
            }
            (None, Some(len)) => {
                return Err(syn::Error::new(
                    len.span(),
                    "`len` applies only to `Vec` fields",
                ));
            }
            (None, None) => quote_spanned! {span=>
                <#ty as ::rlx::params::Params<#brand>>::declare(__g, &#path)
            },
        };
        inits.push(quote!(#ident: #init));
    }

    Ok(quote! {
        impl #impl_generics ::rlx::params::Params<#brand> for #name #ty_generics #where_clause {
            #[track_caller]
            fn declare(
                __g: &#brand ::rlx::typed::Scope<#brand>,
                __at: &::rlx::params::ParamPath,
            ) -> Self {
                let _ = (__g, __at);
                Self { #(#inits),* }
            }
        }
    })
}

/// True if the last segment of `ty`'s path is `name`.
fn type_is(ty: &Type, name: &str) -> bool {
    matches!(ty, Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == name))
}

/// `T` if `ty` is `Vec<T>`.
fn vec_element(ty: &Type) -> Option<&Type> {
    generic_element(ty, "Vec")
}

/// `T` if `ty` is `Option<T>`.
fn option_element(ty: &Type) -> Option<&Type> {
    generic_element(ty, "Option")
}

/// `T` if `ty` is `wrapper<T>`.
fn generic_element<'t>(ty: &'t Type, wrapper: &str) -> Option<&'t Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != wrapper {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        GenericArgument::Type(t) if args.args.len() == 1 => Some(t),
        _ => None,
    }
}

fn parse_attrs(attrs: &[syn::Attribute]) -> syn::Result<FieldAttrs> {
    let mut out = FieldAttrs::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("param")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                if out.rename.is_some() {
                    return Err(meta.error("`rename` is given twice"));
                }
                out.rename = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("transpose") {
                if out.transpose {
                    return Err(meta.error("`transpose` is given twice"));
                }
                out.transpose = true;
                Ok(())
            } else if meta.path.is_ident("when") {
                if out.when.is_some() {
                    return Err(meta.error("`when` is given twice"));
                }
                out.when = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("skip") {
                out.skip = true;
                Ok(())
            } else if meta.path.is_ident("len") {
                if out.len.is_some() {
                    return Err(meta.error("`len` is given twice"));
                }
                out.len = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("split") {
                if out.split.is_some() {
                    return Err(meta.error("`split` is given twice"));
                }
                let span = meta.path.span();
                let (mut parts, mut index, mut axis) = (None, None, None);
                meta.parse_nested_meta(|inner| {
                    if inner.path.is_ident("parts") {
                        parts = Some(inner.value()?.parse::<LitInt>()?);
                    } else if inner.path.is_ident("index") {
                        index = Some(inner.value()?.parse::<LitInt>()?);
                    } else if inner.path.is_ident("axis") {
                        axis = Some(inner.value()?.parse::<syn::Expr>()?);
                    } else {
                        return Err(inner.error(
                            "unknown `split` argument; expected `parts`, `index` or `axis`",
                        ));
                    }
                    Ok(())
                })?;
                let (Some(parts), Some(index)) = (parts, index) else {
                    return Err(syn::Error::new(
                        span,
                        "`split` needs `parts` and `index`, e.g. `split(parts = 3, index = 0)`",
                    ));
                };
                let (p, i): (usize, usize) = (parts.base10_parse()?, index.base10_parse()?);
                if p == 0 || i >= p {
                    return Err(syn::Error::new(
                        index.span(),
                        format!("split index {i} is out of range: there are {p} parts, numbered from 0"),
                    ));
                }
                out.split = Some((parts, index, axis));
                Ok(())
            } else {
                Err(meta.error(
                    "unknown `param` attribute; expected `rename = \"..\"`, `transpose`, `split(..)`, `len = Dim`, `when = \"flag\"` or `skip`",
                ))
            }
        })?;
    }
    Ok(out)
}
