//! With the `mlx` feature, gives the repository's tests and examples an rpath to
//! libmlx (a dependency's link arguments do not reach them; see rlx-mlx-sys/build.rs).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIBDIR");
    println!("cargo:rerun-if-env-changed=DEP_MLX_ALLOW_SHLIB_UNDEFINED");
    // MLX's CUDA build needs the NVIDIA driver, which the build machine may not have.
    if std::env::var_os("DEP_MLX_ALLOW_SHLIB_UNDEFINED").is_some() {
        println!("cargo:rustc-link-arg=-Wl,--allow-shlib-undefined");
    }
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        // For tests that run binaries built elsewhere (trybuild), which get no rpath.
        println!("cargo:rustc-env=RLX_MLX_LIBDIR={dir}");
    }
}
