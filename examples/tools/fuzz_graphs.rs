//! Differential testing on random graphs, for as long as you like: every case is a random
//! well-typed graph run on each backend configuration (the CPU with 1 and 2 threads; MLX
//! eager, lazy and compiled), every node checked against the op's float64 reference on
//! the operands that configuration produced, and the same for each case's gradient graph (see
//! `rlx_testkit::fuzz`).
//!
//! ```text
//! cargo run --release --example fuzz_graphs -- --cases 20000 --seed 1 [--from 0] [--steps 10]
//!     [--cpu-only] [--progress 1000]
//! cargo run --release --example fuzz_graphs -- --show CASE_SEED   # print one case
//! cargo run --release --example fuzz_graphs -- --case CASE_SEED [--cases 20]  # run it again
//! ```
//!
//! `--case` checks the one case a report named, `--cases` times (once by default; a race
//! shows up in some runs only), and prints what each run found.
//!
//! Prints each mismatch and failure (already minimised to one op and its operands), then
//! `fuzz_graphs cases=N mismatches=M failures=F seed=S`. A progress line goes to stderr
//! every `--progress` cases (1,000): a run cut short by a time limit (a lent GPU's) still
//! says how far it got clean. `--from K` starts at case K of the seed's sequence, so
//! `--cases 2500` and `--from 2500 --cases 2500` together check the cases of `--cases 5000`
//! (a long run split over calls of limited time).

use std::error::Error;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rlx_testkit::fuzz::{Config, case_seed, run_cases};

/// The latest case `--from` starts at.
const MAX_FROM: usize = 100_000_000;

fn main() -> Result<(), Box<dyn Error>> {
    let (mut cases, mut seed, mut steps, mut cpu_only) = (None, 1u64, 10usize, false);
    let mut one_case: Option<u64> = None;
    let mut progress = 1000usize;
    let mut from = 0usize;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--cases" => cases = Some(it.next().ok_or("--cases needs a count")?.parse::<usize>()?),
            "--seed" => seed = it.next().ok_or("--seed needs a number")?.parse()?,
            "--from" => {
                from = it.next().ok_or("--from needs a case number")?.parse()?;
                // Reaching case K draws K seeds first: keep that well under a second.
                if from > MAX_FROM {
                    return Err(format!("--from takes at most {MAX_FROM}").into());
                }
            }
            "--steps" => steps = it.next().ok_or("--steps needs a count")?.parse()?,
            "--cpu-only" => cpu_only = true,
            "--progress" => {
                progress = it.next().ok_or("--progress needs a count")?.parse()?;
                if progress == 0 {
                    return Err("--progress takes at least 1".into());
                }
            }
            "--case" => one_case = Some(it.next().ok_or("--case needs a case seed")?.parse()?),
            "--show" => {
                // Print one case (by its own seed, as reports name it) and stop.
                let case_seed: u64 = it.next().ok_or("--show needs a case seed")?.parse()?;
                let case = rlx_testkit::fuzz::generate(case_seed, steps);
                println!("{}", case.graph);
                for (name, value) in case.inputs.iter().chain(&case.params) {
                    println!("{name} {:?} = {:?}", value.shape(), value.to_f64_vec());
                }
                println!("dims {:?}", case.dims);
                return Ok(());
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    #[cfg(feature = "mlx")]
    rlx::mlx::set_kernel_fusion(false)?;
    let configs: Vec<Config> = Config::all()
        .into_iter()
        .filter(|c| !cpu_only || matches!(c, Config::Cpu { .. }))
        .collect();
    let labels: Vec<String> = configs.iter().map(Config::label).collect();
    eprintln!("configurations: {}", labels.join(", "));
    if let Some(case_seed) = one_case {
        let cases = cases.unwrap_or(1);
        let mut report = rlx_testkit::fuzz::Report::default();
        for run in 0..cases {
            let (mismatches, failures) = (report.mismatches.len(), report.failures.len());
            rlx_testkit::fuzz::check_seed(case_seed, steps, &configs, &mut report);
            for m in &report.mismatches[mismatches..] {
                println!("run {run}: MISMATCH config={}: {}", m.config, m.detail);
            }
            for f in &report.failures[failures..] {
                println!("run {run}: FAILURE {f}");
            }
        }
        println!(
            "fuzz_graphs case={case_seed} runs={cases} mismatches={} failures={}",
            report.mismatches.len(),
            report.failures.len()
        );
        return Ok(());
    }
    let cases = cases.unwrap_or(1000);
    let end = from
        .checked_add(cases)
        .ok_or("--from plus --cases passes the largest case number")?;
    let started = Instant::now();
    // A watchdog: a case running longer than five minutes is a hang, reported with its seed
    // (the largest cases, with their gradients, take seconds).
    let done = Arc::new(AtomicUsize::new(0));
    let last = Arc::new(Mutex::new(Instant::now()));
    {
        let (done, last) = (Arc::clone(&done), Arc::clone(&last));
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(5));
                let stalled = last.lock().map(|t| t.elapsed()).unwrap_or_default();
                if stalled > Duration::from_secs(300) {
                    let case_seed = case_seed(seed, from + done.load(Ordering::Relaxed));
                    println!("FAILURE case seed {case_seed} ran over 300 s (a hang)");
                    // Where every thread is, when gdb is installed (best effort).
                    let stacks = std::process::Command::new("gdb")
                        .args(["-p", &std::process::id().to_string(), "-batch"])
                        .args(["-ex", "thread apply all bt 12"])
                        .output();
                    if let Ok(out) = stacks {
                        println!("{}", String::from_utf8_lossy(&out.stdout));
                    }
                    println!(
                        "fuzz_graphs cases={} mismatches=? failures=1 seed={seed} from={from}",
                        done.load(Ordering::Relaxed) + 1
                    );
                    std::process::exit(1);
                }
            }
        });
    }
    let (mut shown_mismatches, mut shown_failures) = (0, 0);
    let report = run_cases(seed, from..end, steps, &configs, |report| {
        done.store(report.cases, Ordering::Relaxed);
        if let Ok(mut t) = last.lock() {
            *t = Instant::now();
        }
        for m in &report.mismatches[shown_mismatches..] {
            println!("MISMATCH seed={} config={}: {}", m.seed, m.config, m.detail);
        }
        for f in &report.failures[shown_failures..] {
            println!("FAILURE {f}");
        }
        shown_mismatches = report.mismatches.len();
        shown_failures = report.failures.len();
        if report.cases % progress == 0 {
            eprintln!(
                "{} cases (to case {}), {:.0} s: {} values checked, {} unjudged, {} refused by all",
                report.cases,
                from + report.cases,
                started.elapsed().as_secs_f64(),
                report.checked,
                report.unjudged,
                report.refused
            );
        }
    });
    eprintln!(
        "{} values checked (gradient graphs of {} cases among them; {} sinks against a fused \
         CPU run), {} unjudged, {} cases refused by every configuration, {:.0} s",
        report.checked,
        report.gradients,
        report.fused,
        report.unjudged,
        report.refused,
        started.elapsed().as_secs_f64()
    );
    println!(
        "fuzz_graphs cases={} mismatches={} failures={} seed={seed} from={from}",
        report.cases,
        report.mismatches.len(),
        report.failures.len()
    );
    Ok(())
}
