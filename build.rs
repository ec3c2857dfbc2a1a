//! With the `mlx` feature, gives the repository's tests and examples an rpath to
//! libmlx (a dependency's link arguments do not reach them; see rlx-mlx-sys/build.rs).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIBDIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        // For tests that run binaries built elsewhere (trybuild), which get no rpath.
        println!("cargo:rustc-env=RLX_MLX_LIBDIR={dir}");
    }
}
