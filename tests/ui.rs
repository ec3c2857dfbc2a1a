//! Compile-fail cases pin the error messages of the typed frontend (`fail/`) and of the
//! macros (`model/`); pass cases must compile.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("ui-tests/fail/*.rs");
    cases.compile_fail("ui-tests/model/*.rs");
    cases.pass("ui-tests/pass/*.rs");
}
