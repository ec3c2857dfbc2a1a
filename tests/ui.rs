//! Compile-fail cases pin the error messages of the typed frontend (`fail/`) and of the
//! macros (`model/`); pass cases must compile.

#[test]
fn ui() {
    // The pass cases link rlx, whose MLX backend loads libmlx at run time, but binaries
    // trybuild builds get no rpath from our build scripts: run the cases in a child
    // process that has the library on its search path.
    if let Some(dir) = option_env!("RLX_MLX_LIBDIR")
        && std::env::var_os("RLX_UI_CHILD").is_none()
    {
        let path = match std::env::var("LD_LIBRARY_PATH") {
            Ok(old) if !old.is_empty() => format!("{dir}:{old}"),
            _ => dir.to_string(),
        };
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["ui", "--exact", "--nocapture"])
            .env("RLX_UI_CHILD", "1")
            .env("LD_LIBRARY_PATH", path)
            .status()
            .unwrap();
        assert!(status.success(), "the ui cases failed (see above)");
        return;
    }
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui-tests/fail/*.rs");
    cases.compile_fail("ui-tests/model/*.rs");
    cases.pass("ui-tests/pass/*.rs");
}
