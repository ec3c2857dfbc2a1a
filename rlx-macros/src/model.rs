//! `#[rlx::model]`: a model type with `build`, `compile` and a typed `run`, generated from a
//! fn over typed tensor handles.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{FnArg, GenericParam, Ident, ItemFn, LitStr, Pat, ReturnType, Type};

/// What one argument of the model fn is.
enum Role {
    /// `&Scope<'g>`: the graph being built.
    Scope,
    /// `#[config] cfg: &C`: the config, passed to `build` and `compile`.
    Config(Type),
    /// `p: &P`: the params struct, declared at the top level.
    Params,
    /// `#[param] w: Tensor<..>`: one weight named after the argument.
    Param(String),
    /// `x: Tensor<..>`: a graph input.
    Input(String),
    /// `cache: State<..>`: a state named after the argument.
    State(String),
}

struct Arg {
    ident: Ident,
    ty: Type,
    role: Role,
}

/// The arguments of `#[rlx::model(..)]`.
#[derive(Default)]
struct ModelAttrs {
    outputs: Option<Vec<Ident>>,
    /// The fn makes states in its body (`g.state(..)`, a cache per layer): the model runs
    /// in a context even without a `State` argument.
    states: bool,
}

pub fn expand(attr: TokenStream, mut item: ItemFn) -> syn::Result<TokenStream> {
    let attrs = parse_model_attrs(attr)?;
    check_signature(&item)?;
    let args = classify_args(&mut item)?;
    let output_count = output_count(&item.sig.output)?;
    let outputs: Vec<String> = match attrs.outputs {
        Some(names) => {
            if names.len() != output_count {
                return Err(syn::Error::new(
                    names.first().map_or(Span::call_site(), |n| n.span()),
                    format!(
                        "`outputs` names {} tensors but the fn returns {output_count}",
                        names.len()
                    ),
                ));
            }
            for (i, n) in names.iter().enumerate() {
                if names[..i].contains(n) {
                    return Err(syn::Error::new(
                        n.span(),
                        format!("output `{n}` is named twice"),
                    ));
                }
            }
            names.iter().map(|n| n.to_string()).collect()
        }
        None if output_count == 1 => vec!["output".to_string()],
        None => (0..output_count).map(|i| format!("output_{i}")).collect(),
    };
    generate(&item, &args, &outputs, attrs.states)
}

fn parse_model_attrs(attr: TokenStream) -> syn::Result<ModelAttrs> {
    let mut out = ModelAttrs::default();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("outputs") {
            if out.outputs.is_some() {
                return Err(meta.error("`outputs` is given twice"));
            }
            let mut names = Vec::new();
            meta.parse_nested_meta(|inner| {
                names.push(inner.path.require_ident()?.clone());
                Ok(())
            })?;
            out.outputs = Some(names);
            Ok(())
        } else if meta.path.is_ident("states") {
            out.states = true;
            Ok(())
        } else {
            Err(meta.error("unknown `model` argument; expected `outputs(name, ..)` or `states`"))
        }
    });
    syn::parse::Parser::parse2(parser, attr)?;
    Ok(out)
}

fn check_signature(item: &ItemFn) -> syn::Result<()> {
    let sig = &item.sig;
    if let Some(t) = &sig.asyncness {
        return Err(syn::Error::new(
            t.span(),
            "a model fn cannot be `async`: it builds a graph, it does not run one",
        ));
    }
    if let Some(t) = &sig.constness {
        return Err(syn::Error::new(t.span(), "a model fn cannot be `const`"));
    }
    if let Some(t) = &sig.unsafety {
        return Err(syn::Error::new(t.span(), "a model fn cannot be `unsafe`"));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new(
            abi.span(),
            "a model fn cannot have an `extern` ABI",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new(v.span(), "a model fn cannot be variadic"));
    }
    let mut lifetimes = 0;
    for param in &sig.generics.params {
        match param {
            GenericParam::Lifetime(_) => {
                lifetimes += 1;
                if lifetimes > 1 {
                    return Err(syn::Error::new(
                        param.span(),
                        "a model fn takes one lifetime, the graph's (`'g`)",
                    ));
                }
            }
            GenericParam::Type(t) => {
                return Err(syn::Error::new(
                    t.span(),
                    "a model fn cannot be generic over types: the model type needs concrete shapes and element types; write a plain generic fn and call it from a model fn",
                ));
            }
            GenericParam::Const(c) => {
                return Err(syn::Error::new(
                    c.span(),
                    "a model fn cannot be generic over consts; use `Const<N>` dims or a config dim",
                ));
            }
        }
    }
    if let ReturnType::Default = sig.output {
        return Err(syn::Error::new(
            sig.paren_token.span.close(),
            "a model fn must return its outputs: a `Tensor` or a tuple of `Tensor`s",
        ));
    }
    Ok(())
}

/// The fn without the argument attributes only this macro understands.
pub fn strip_arg_attrs(mut item: ItemFn) -> ItemFn {
    for input in item.sig.inputs.iter_mut() {
        if let FnArg::Typed(t) = input {
            t.attrs.retain(|a| {
                !["config", "param", "input"]
                    .iter()
                    .any(|n| a.path().is_ident(n))
            });
        }
    }
    item
}

/// The last path segment's name of `ty`, looking through references.
fn type_name(ty: &Type) -> Option<String> {
    match ty {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last().map(|s| s.ident.to_string()),
        Type::Reference(r) => type_name(&r.elem),
        Type::Paren(p) => type_name(&p.elem),
        Type::Group(g) => type_name(&g.elem),
        _ => None,
    }
}

/// Types that name a tensor: `Tensor<..>` or an alias of one. Paths that surely are not
/// (std containers, primitives) are rejected here; an alias of something else is caught by
/// rustc through a bound with its own message.
fn is_tensor(ty: &Type) -> bool {
    const NOT_TENSORS: &[&str] = &[
        "Vec",
        "Option",
        "Result",
        "String",
        "Box",
        "Rc",
        "Arc",
        "HashMap",
        "BTreeMap",
        "str",
        "bool",
        "char",
        "f32",
        "f64",
        "i8",
        "i16",
        "i32",
        "i64",
        "i128",
        "isize",
        "u8",
        "u16",
        "u32",
        "u64",
        "u128",
        "usize",
        "HostTensor",
        "Scope",
    ];
    match ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .is_some_and(|s| !NOT_TENSORS.contains(&s.ident.to_string().as_str())),
        Type::Paren(p) => is_tensor(&p.elem),
        Type::Group(g) => is_tensor(&g.elem),
        _ => false,
    }
}

/// Takes the argument attributes (`#[config]`, `#[param]`, `#[input(rename = "..")]`) off the
/// fn and says what each argument is.
fn classify_args(item: &mut ItemFn) -> syn::Result<Vec<Arg>> {
    let mut args = Vec::new();
    let (mut scope, mut config, mut params) = (false, false, false);
    for input in item.sig.inputs.iter_mut() {
        let typed = match input {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(
                    r.span(),
                    "a model fn cannot take `self`: write a free fn; the macro generates the model type",
                ));
            }
            FnArg::Typed(t) => t,
        };
        let Pat::Ident(pat) = &*typed.pat else {
            return Err(syn::Error::new(
                typed.pat.span(),
                "model fn arguments must be plain names: each input is named after its argument",
            ));
        };
        let ident = pat.ident.clone();
        let mut is_config = false;
        let mut is_param = false;
        let mut rename: Option<LitStr> = None;
        let mut keep = Vec::new();
        for attr in typed.attrs.drain(..) {
            if attr.path().is_ident("config") {
                attr.meta.require_path_only()?;
                is_config = true;
            } else if attr.path().is_ident("param") {
                attr.meta.require_path_only()?;
                is_param = true;
            } else if attr.path().is_ident("input") {
                attr.parse_nested_meta(|meta| {
                    if meta.path.is_ident("rename") {
                        rename = Some(meta.value()?.parse()?);
                        Ok(())
                    } else {
                        Err(meta.error("unknown `input` argument; expected `rename = \"..\"`"))
                    }
                })?;
            } else {
                keep.push(attr);
            }
        }
        typed.attrs = keep;
        let ty = &*typed.ty;
        let role = if !is_config && !is_param && type_name(ty).as_deref() == Some("State") {
            if matches!(ty, Type::Reference(_)) {
                return Err(syn::Error::new(
                    ty.span(),
                    "take a `State` by value: writing it consumes the handle",
                ));
            }
            Role::State(ident.to_string())
        } else if is_config {
            let Type::Reference(r) = ty else {
                return Err(syn::Error::new(
                    ty.span(),
                    "a `#[config]` argument must be a reference, e.g. `cfg: &BertConfig`",
                ));
            };
            if std::mem::replace(&mut config, true) {
                return Err(syn::Error::new(
                    ident.span(),
                    "a model fn takes at most one `#[config]` argument",
                ));
            }
            Role::Config((*r.elem).clone())
        } else if is_param {
            if !is_tensor(ty) {
                return Err(syn::Error::new(
                    ty.span(),
                    "a `#[param]` argument must be a `Tensor`; group weights in a `#[derive(Params)]` struct passed by reference",
                ));
            }
            Role::Param(ident.to_string())
        } else if is_tensor(ty) {
            let name = rename
                .as_ref()
                .map_or_else(|| ident.to_string(), LitStr::value);
            Role::Input(name)
        } else if matches!(ty, Type::Reference(_)) && type_name(ty).as_deref() == Some("Scope") {
            if std::mem::replace(&mut scope, true) {
                return Err(syn::Error::new(
                    ident.span(),
                    "a model fn takes the scope at most once",
                ));
            }
            Role::Scope
        } else if let Type::Reference(r) = ty {
            if r.mutability.is_some() {
                return Err(syn::Error::new(
                    ty.span(),
                    "params are read, not changed: take them by shared reference (`&P`)",
                ));
            }
            if std::mem::replace(&mut params, true) {
                return Err(syn::Error::new(
                    ty.span(),
                    "a model fn takes one params struct; nest the others in it as fields (or mark a config with `#[config]`)",
                ));
            }
            Role::Params
        } else {
            return Err(syn::Error::new(
                ty.span(),
                "unsupported model argument: expected a `Tensor` input, a `State`, `&Params` weights, a `#[param] Tensor`, a `#[config] &Config` or the `&Scope`",
            ));
        };
        if let Role::State(name) = &role {
            let taken = args
                .iter()
                .any(|a: &Arg| matches!(&a.role, Role::State(n) if n == name));
            if taken {
                return Err(syn::Error::new(
                    ident.span(),
                    format!("two states are named `{name}`"),
                ));
            }
        }
        if rename.is_some() && !matches!(role, Role::Input(_)) {
            return Err(syn::Error::new(
                ident.span(),
                "`#[input(rename)]` applies only to tensor inputs",
            ));
        }
        if let Role::Input(name) | Role::Param(name) = &role {
            let span = rename.as_ref().map_or(ident.span(), |r| r.span());
            let taken = args
                .iter()
                .any(|a: &Arg| matches!(&a.role, Role::Input(n) | Role::Param(n) if n == name));
            if taken {
                return Err(syn::Error::new(
                    span,
                    format!("two inputs are named `{name}`"),
                ));
            }
        }
        args.push(Arg {
            ident,
            ty: (*typed.ty).clone(),
            role,
        });
    }
    Ok(args)
}

/// How many tensors the fn returns (a tuple counts its elements).
fn output_count(output: &ReturnType) -> syn::Result<usize> {
    let ReturnType::Type(_, ty) = output else {
        unreachable!("checked by check_signature")
    };
    match &**ty {
        t if is_tensor(t) => Ok(1),
        Type::Tuple(tuple) if !tuple.elems.is_empty() => {
            for elem in &tuple.elems {
                if !is_tensor(elem) {
                    return Err(syn::Error::new(
                        elem.span(),
                        "every output of a model fn must be a `Tensor`",
                    ));
                }
            }
            Ok(tuple.elems.len())
        }
        other => Err(syn::Error::new(
            other.span(),
            "a model fn must return a `Tensor` or a tuple of `Tensor`s",
        )),
    }
}

/// The declared output types, one per output.
fn output_types(output: &ReturnType) -> Vec<Type> {
    match output {
        ReturnType::Type(_, ty) => match &**ty {
            Type::Tuple(t) => t.elems.iter().cloned().collect(),
            other => vec![other.clone()],
        },
        ReturnType::Default => Vec::new(),
    }
}

/// `ty` with every named lifetime replaced by `'_`, for use inside the build closure.
fn anonymize_lifetimes(ty: &Type) -> Type {
    struct Anon;
    impl VisitMut for Anon {
        fn visit_lifetime_mut(&mut self, l: &mut syn::Lifetime) {
            *l = syn::Lifetime::new("'_", l.span());
        }
    }
    let mut ty = ty.clone();
    Anon.visit_type_mut(&mut ty);
    ty
}

fn camel_case(name: &str) -> String {
    name.split('_')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let mut c = s.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

fn generate(
    item: &ItemFn,
    args: &[Arg],
    outputs: &[String],
    body_states: bool,
) -> syn::Result<TokenStream> {
    let fn_name = &item.sig.ident;
    let vis = &item.vis;
    let model = format_ident!(
        "{}",
        camel_case(&fn_name.to_string()),
        span = fn_name.span()
    );

    let config_ty = args.iter().find_map(|a| match &a.role {
        Role::Config(t) => Some(t.clone()),
        _ => None,
    });
    let (config_param, config_arg, sizes) = match &config_ty {
        Some(t) => (
            quote!(config: &#t,),
            quote!(config,),
            quote!(::rlx::model::Config::sizes(config)),
        ),
        None => (quote!(), quote!(), quote!(::rlx::typed::Sizes::new())),
    };

    let mut declare = Vec::new();
    let mut call_args = Vec::new();
    let mut run_params = Vec::new();
    let mut run_inputs = Vec::new();
    let mut input_names = Vec::new();
    let mut state_names = Vec::new();
    for arg in args {
        let ident = &arg.ident;
        let local = format_ident!("__{}", ident);
        match &arg.role {
            Role::Scope => call_args.push(quote!(__g)),
            Role::Config(_) => call_args.push(quote!(config)),
            Role::Params => {
                declare.push(quote!(let #local = __g.params();));
                call_args.push(quote!(&#local));
            }
            Role::Param(name) => {
                declare.push(quote!(let #local = __g.param(#name);));
                call_args.push(quote!(#local));
            }
            Role::State(name) => {
                let ty = anonymize_lifetimes(&arg.ty);
                let span = arg.ty.span();
                declare.push(quote_spanned!(span=> let #local: #ty = __g.state(#name);));
                call_args.push(quote!(#local));
                state_names.push(name.clone());
            }
            Role::Input(name) => {
                let ty = anonymize_lifetimes(&arg.ty);
                let span = arg.ty.span();
                declare.push(
                    quote_spanned!(span=> let #local: #ty = ::rlx::model::input(__g, #name);),
                );
                call_args.push(quote!(#local));
                run_params.push(
                    quote!(#ident: impl ::core::convert::Into<::rlx::tensor::TensorRef<'__t>>),
                );
                run_inputs.push(quote!((#name, #ident.into())));
                input_names.push(name.clone());
            }
        }
    }

    let out_locals: Vec<Ident> = (0..outputs.len())
        .map(|i| format_ident!("__out{i}"))
        .collect();
    let output_types = output_types(&item.sig.output);
    let mark_outputs =
        out_locals
            .iter()
            .zip(outputs)
            .zip(&output_types)
            .map(|((local, name), ty)| {
                let span = ty.span();
                quote_spanned!(span=> ::rlx::model::output(__g, #name, #local);)
            });
    // A model with states runs in a context.
    let stateful = body_states || !state_names.is_empty();
    let (run_call, context_param) = if stateful {
        (
            quote!(run_in_outputs),
            quote!(context: &mut ::rlx::backend::Context,),
        )
    } else {
        (quote!(run_outputs), quote!())
    };
    let context_arg = if stateful { quote!(context,) } else { quote!() };
    let (bind_outputs, run_result, run_return) = if outputs.len() == 1 {
        let o = &out_locals[0];
        (
            quote!(let #o = #fn_name(#(#call_args),*);),
            quote!(let [#o] = self.inner.#run_call::<1>(#context_arg &[#(#run_inputs),*])?; Ok(#o)),
            quote!(::rlx::tensor::HostTensor),
        )
    } else {
        let n = outputs.len();
        let tys = out_locals.iter().map(|_| quote!(::rlx::tensor::HostTensor));
        (
            quote!(let (#(#out_locals),*) = #fn_name(#(#call_args),*);),
            quote!(let [#(#out_locals),*] = self.inner.#run_call::<#n>(#context_arg &[#(#run_inputs),*])?; Ok((#(#out_locals),*))),
            quote!((#(#tys),*)),
        )
    };
    let run_name = if stateful {
        format_ident!("run_in")
    } else {
        format_ident!("run")
    };

    let model_doc = format!(
        "The model of [`{fn_name}`], generated by `#[rlx::model]`.\n\n\
         Inputs: {}. Outputs: {}.\n\n\
         [`build`](Self::build) makes its graph, [`compile`](Self::compile) compiles it for a \
         backend, [`run`](Self::run) runs it. Weights are loaded through the \
         [`Compiled`](::rlx::model::Compiled) it dereferences to.",
        list(&input_names),
        list(outputs),
    );
    let run_doc = if stateful {
        format!(
            "Runs the model in `context` (its states: {}) on {}; returns {}. Runtime dims are \
             read from the inputs' shapes. A context comes from `new_context`.",
            list(&state_names),
            list(&input_names),
            list(outputs)
        )
    } else {
        format!(
            "Runs the model on {}; returns {}. Runtime dims are read from the inputs' shapes.",
            list(&input_names),
            list(outputs)
        )
    };
    let config_doc = if config_ty.is_some() {
        " `config` fixes the config-bound dims."
    } else {
        ""
    };
    let build_doc = format!("The model's graph.{config_doc}");
    let compile_doc = format!(
        "Builds the graph and compiles it for `backend`; weights are bound next.{config_doc}"
    );

    Ok(quote! {
        #item

        #[doc = #model_doc]
        #vis struct #model {
            inner: ::rlx::model::Compiled,
        }

        impl #model {
            /// Input names, in argument order.
            pub const INPUTS: &'static [&'static str] = &[#(#input_names),*];
            /// State names, in argument order.
            pub const STATES: &'static [&'static str] = &[#(#state_names),*];
            /// Output names, in return order.
            pub const OUTPUTS: &'static [&'static str] = &[#(#outputs),*];

            #[doc = #build_doc]
            pub fn build(#config_param) -> ::core::result::Result<::rlx::ir::Graph, ::rlx::typed::BuildErrors> {
                Self::build_with_manifest(#config_arg).map(|(graph, _)| graph)
            }

            /// The weights the model declares: names, shapes, dtypes and checkpoint layout.
            pub fn manifest(#config_param) -> ::core::result::Result<::rlx::params::Manifest, ::rlx::typed::BuildErrors> {
                Self::build_with_manifest(#config_arg).map(|(_, manifest)| manifest)
            }

            /// The graph and the manifest of its weights.
            pub fn build_with_manifest(#config_param) -> ::core::result::Result<(::rlx::ir::Graph, ::rlx::params::Manifest), ::rlx::typed::BuildErrors> {
                ::rlx::typed::build_model(&#sizes, |__g| {
                    #(#declare)*
                    #bind_outputs
                    #(#mark_outputs)*
                })
            }

            #[doc = #compile_doc]
            pub fn compile<B: ::rlx::backend::Backend>(backend: &B, #config_param) -> ::core::result::Result<Self, ::rlx::model::ModelError>
            where
                B::Executable: 'static,
            {
                let (graph, manifest) = Self::build_with_manifest(#config_arg)?;
                let inner = ::rlx::model::Compiled::new(backend, graph, manifest)?;
                Ok(Self { inner })
            }

            #[doc = #run_doc]
            pub fn #run_name<'__t>(&self, #context_param #(#run_params),*) -> ::core::result::Result<#run_return, ::rlx::backend::RunError> {
                #run_result
            }

            /// The compiled model.
            pub fn into_inner(self) -> ::rlx::model::Compiled {
                self.inner
            }
        }

        impl ::core::ops::Deref for #model {
            type Target = ::rlx::model::Compiled;
            fn deref(&self) -> &::rlx::model::Compiled {
                &self.inner
            }
        }
    })
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
