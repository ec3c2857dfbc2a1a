//! Worker threads that stay awake for a whole run.
//!
//! A decode step runs hundreds of kernels of a few microseconds each. Handing each one to
//! a thread pool whose threads sleep between jobs pays a wake-up per kernel, and under a
//! hypervisor a wake-up costs tens of microseconds: more than the kernel. So a run takes a
//! [`Team`] for its whole length: the calling thread executes the thunks, and the team's
//! helpers spin, watching for work. A kernel splits its work into tasks
//! ([`for_each`]); the caller publishes them, takes tasks itself, and waits until every
//! task is done. It never waits for a helper that took no task: when the machine has more
//! runnable threads than cores, a helper the scheduler has set aside would otherwise hold
//! every kernel for the rest of its time slice (decode fell from 80 to 3 tokens a second
//! beside one other busy process). A helper that arrives after its job's tasks are all
//! taken finds the job closed and leaves it alone; the caller only waits for helpers still
//! inside a job before it overwrites that job with the next one.
//! After a run the helpers linger briefly (the next decode step usually follows within
//! microseconds), then sleep until another run wakes them.
//!
//! One team per thread count serves the process; a run that finds its team busy (another
//! thread's run holds it) runs its kernels on its own thread. Tasks inside tasks run
//! serially on the thread that reached them.

use std::cell::{Cell, UnsafeCell};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long helpers keep spinning after a run before they sleep.
const LINGER: Duration = Duration::from_micros(500);
/// How long helpers spin inside a run without work before they sleep (a run whose kernels
/// are serial for a while should not keep a core busy).
const PATIENCE: Duration = Duration::from_millis(2);
/// Spins the caller waits for a helper's task before it yields its core, so that a helper
/// waiting for a core can have this one (about 10-50 µs of spinning).
const SPINS_BEFORE_YIELD: u32 = 1 << 12;
/// How long a helper spins without work before it starts yielding its core between looks
/// (a decode step's kernels come microseconds apart; a caller the scheduler has set aside
/// publishes nothing, and the core is better used by whoever waits for it).
const YIELD_AFTER: Duration = Duration::from_micros(50);

/// `tasks` calls of the closure behind `data`, made through `call`.
#[derive(Clone, Copy)]
struct Job {
    data: *const (),
    call: unsafe fn(*const (), usize),
    tasks: usize,
}

/// A value on a cache line of its own, so that threads polling one counter do not slow
/// the threads updating another.
#[repr(align(128))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What the caller and its helpers share.
struct Shared {
    helpers: usize,
    /// Even while a job is open (each helper serves an open epoch at most once), odd once
    /// its tasks are all done and while the next one is written.
    epoch: Line<AtomicU64>,
    /// Helpers inside an open job: they announce themselves here, then check that the
    /// epoch is still the open one before they read `job` (see [`enter`]).
    inside: Line<AtomicUsize>,
    /// Written by the caller only while the epoch is odd and no helper is inside; read by
    /// helpers only inside an open epoch.
    job: UnsafeCell<Job>,
    /// The next task index to take.
    next: Line<AtomicUsize>,
    /// Tasks of the current job finished, by any thread.
    done: Line<AtomicUsize>,
    /// A run holds the team: helpers spin `PATIENCE` rather than `LINGER` for work.
    active: AtomicBool,
    /// Runs started; a sleeping helper wakes when it changes.
    runs: AtomicU64,
    /// Helpers asleep (or about to be): whoever publishes work wakes them.
    parked: AtomicUsize,
    stop: AtomicBool,
    /// A task panicked on a helper; the caller panics in its place.
    panicked: AtomicBool,
    sleep: Mutex<()>,
    wake: Condvar,
    /// Tests hold the helpers away from every job, as a scheduler may.
    #[cfg(test)]
    held: AtomicBool,
}

// SAFETY: `job` is written by the team's one caller only while the epoch is odd and no
// helper is inside, and read by helpers only inside an open epoch (see [`enter`]); the
// closure it points at is `Sync`. Everything else is atomic or a lock.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer in `job` is only dereferenced under that protocol.
unsafe impl Send for Shared {}

thread_local! {
    /// The team of the run this thread is executing, if it holds one.
    static CURRENT: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
    /// This thread is inside a task: further splitting runs serially.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Helper threads for runs of one thread count.
pub(crate) struct Team {
    shared: Arc<Shared>,
    owner: Mutex<()>,
}

impl Team {
    /// The process's team of `threads` threads (the caller and `threads - 1` helpers),
    /// started on first use; the error says why the system would not start a helper.
    pub(crate) fn of(threads: usize) -> Result<Arc<Team>, String> {
        static TEAMS: OnceLock<Mutex<Vec<Arc<Team>>>> = OnceLock::new();
        let mut teams = TEAMS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let threads = threads.max(1);
        if let Some(team) = teams.iter().find(|t| t.shared.helpers + 1 == threads) {
            return Ok(team.clone());
        }
        let team = Arc::new(Team::start(threads - 1)?);
        teams.push(team.clone());
        Ok(team)
    }

    fn start(helpers: usize) -> Result<Team, String> {
        let shared = Arc::new(Shared {
            helpers,
            epoch: Line(AtomicU64::new(1)),
            inside: Line(AtomicUsize::new(0)),
            job: UnsafeCell::new(Job {
                data: std::ptr::null(),
                call: noop,
                tasks: 0,
            }),
            next: Line(AtomicUsize::new(0)),
            done: Line(AtomicUsize::new(0)),
            active: AtomicBool::new(false),
            runs: AtomicU64::new(0),
            parked: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            #[cfg(test)]
            held: AtomicBool::new(false),
        });
        for i in 0..helpers {
            let helper = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("rlx-worker-{i}"))
                .spawn(move || help(&helper));
            if let Err(e) = spawned {
                // The helpers already started leave.
                stop_helpers(&shared);
                return Err(e.to_string());
            }
        }
        Ok(Team {
            shared,
            owner: Mutex::new(()),
        })
    }

    /// Runs `f` on this thread with the helpers awake for its parallel kernels, or, if
    /// another run holds the team, with its kernels serial.
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let shared = &*self.shared;
        if shared.helpers == 0 || !CURRENT.with(Cell::get).is_null() {
            return f();
        }
        let guard = match self.owner.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return f(),
        };
        shared.active.store(true, Ordering::Release);
        shared.runs.fetch_add(1, Ordering::SeqCst);
        wake_sleepers(shared);
        CURRENT.with(|c| c.set(shared));
        let result = catch_unwind(AssertUnwindSafe(f));
        CURRENT.with(|c| c.set(std::ptr::null()));
        shared.active.store(false, Ordering::Release);
        drop(guard);
        result.unwrap_or_else(|panic| resume_unwind(panic))
    }
}

impl Drop for Team {
    /// Helpers of a team that is gone leave (the process's teams live for the process;
    /// tests start their own).
    fn drop(&mut self) {
        stop_helpers(&self.shared);
    }
}

/// Tells every helper to leave, waking the ones asleep.
fn stop_helpers(shared: &Shared) {
    shared.stop.store(true, Ordering::Release);
    drop(shared.sleep.lock().unwrap_or_else(|e| e.into_inner()));
    shared.wake.notify_all();
}

unsafe fn noop(_: *const (), _: usize) {}

/// A helper's life: spin while work may come (inside a run, for `PATIENCE` without a
/// job; after one, for `LINGER`), sleep otherwise until a job or a new run arrives.
fn help(shared: &Shared) {
    let mut seen = 1u64;
    // An open epoch this helper has not served yet.
    let fresh = |epoch: u64, seen: u64| epoch != seen && epoch.is_multiple_of(2);
    loop {
        // Asleep until something new: a job, a run starting, or the end.
        let runs = shared.runs.load(Ordering::SeqCst);
        shared.parked.fetch_add(1, Ordering::SeqCst);
        {
            let mut sleeping = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            while !fresh(shared.epoch.load(Ordering::SeqCst), seen)
                && shared.runs.load(Ordering::SeqCst) == runs
                && !shared.stop.load(Ordering::SeqCst)
            {
                sleeping = shared
                    .wake
                    .wait(sleeping)
                    .unwrap_or_else(|e| e.into_inner());
            }
        }
        shared.parked.fetch_sub(1, Ordering::SeqCst);
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        loop {
            #[cfg(test)]
            if shared.held.load(Ordering::Acquire) {
                if shared.stop.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            let epoch = shared.epoch.load(Ordering::Acquire);
            if fresh(epoch, seen) {
                seen = epoch;
                if enter(shared, epoch) {
                    serve(shared);
                    shared.inside.fetch_sub(1, Ordering::Release);
                }
                idle_since = Instant::now();
                spins = 0;
                continue;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(256) {
                continue;
            }
            if shared.stop.load(Ordering::Acquire) {
                return;
            }
            let patience = if shared.active.load(Ordering::Acquire) {
                PATIENCE
            } else {
                LINGER
            };
            let idle = idle_since.elapsed();
            if idle > patience {
                break;
            }
            if idle > YIELD_AFTER {
                std::thread::yield_now();
            }
        }
    }
}

/// Wakes the helpers that sleep, if any (after a new epoch or run, published `SeqCst`).
fn wake_sleepers(shared: &Shared) {
    if shared.parked.load(Ordering::SeqCst) > 0 {
        drop(shared.sleep.lock().unwrap_or_else(|e| e.into_inner()));
        shared.wake.notify_all();
    }
}

/// Enters the job of `epoch` if it is still open; on `true` the helper must leave
/// (`inside` down by one) when it is done with the job.
///
/// The helper announces itself, then looks at the epoch again; the caller closes the epoch,
/// then looks at `inside` before it writes the next job. With both orders sequentially
/// consistent, either the helper sees the epoch closed or the caller sees the helper
/// inside and waits for it.
fn enter(shared: &Shared, epoch: u64) -> bool {
    shared.inside.fetch_add(1, Ordering::SeqCst);
    if shared.epoch.load(Ordering::SeqCst) == epoch {
        return true;
    }
    shared.inside.fetch_sub(1, Ordering::Release);
    false
}

/// Takes tasks of the open job until none is left.
fn serve(shared: &Shared) {
    // SAFETY: this helper is inside the open epoch (`enter`), whose job was written before
    // the epoch's release store; the caller does not write it again while a helper is
    // inside.
    let job = unsafe { *shared.job.get() };
    IN_TASK.with(|t| t.set(true));
    let mut finished = 0;
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= job.tasks {
            break;
        }
        // SAFETY: `data` points at the caller's closure, alive until all `tasks` are done
        // (this one among them), and `call` is its matching trampoline.
        let ran = catch_unwind(|| unsafe { (job.call)(job.data, i) });
        if ran.is_err() {
            shared.panicked.store(true, Ordering::Release);
        }
        finished += 1;
    }
    IN_TASK.with(|t| t.set(false));
    if finished > 0 {
        shared.done.fetch_add(finished, Ordering::Release);
    }
}

/// Spins until `ready`, yielding the core now and then so that a thread waiting for one
/// (a helper in the middle of a task) can run.
fn wait_until(ready: impl Fn() -> bool) {
    let mut spins = 0u32;
    while !ready() {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Calls `f(i)` for every `i` in `0..tasks`, spread over the run's team when this thread
/// holds one (and is not inside a task already), else in order on this thread.
pub(crate) fn for_each<F: Fn(usize) + Sync>(tasks: usize, f: F) {
    let team = CURRENT.with(Cell::get);
    if tasks <= 1 || team.is_null() || IN_TASK.with(Cell::get) {
        (0..tasks).for_each(f);
        return;
    }
    // SAFETY: `CURRENT` is set only while `Team::run` holds the team on this thread.
    let shared = unsafe { &*team };
    /// Calls the closure `data` points at.
    unsafe fn call<F: Fn(usize)>(data: *const (), i: usize) {
        // SAFETY: `data` was made from a `&F` that outlives the job.
        unsafe { (*data.cast::<F>())(i) }
    }
    // The previous job's epoch is closed (odd); helpers that entered it before it closed
    // may still be reading it.
    wait_until(|| shared.inside.load(Ordering::SeqCst) == 0);
    // SAFETY: the epoch is closed and no helper is inside, so none reads `job` until the
    // epoch opens again below.
    unsafe {
        *shared.job.get() = Job {
            data: (&raw const f).cast(),
            call: call::<F>,
            tasks,
        };
    }
    shared.next.store(0, Ordering::Relaxed);
    shared.done.store(0, Ordering::Relaxed);
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    wake_sleepers(shared);
    IN_TASK.with(|t| t.set(true));
    let mut finished = 0;
    let mut panic = None;
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= tasks {
            break;
        }
        // A panicking task ends like any other, and the caller goes on taking tasks: one
        // left untaken would be waited for below, and no helper may ever come for it.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| f(i))) {
            panic.get_or_insert(payload);
        }
        finished += 1;
    }
    IN_TASK.with(|t| t.set(false));
    // Every task is taken; `f` stays alive until every one of them is done. Helpers that
    // took none are not waited for, and once the epoch closes they cannot take one.
    wait_until(|| shared.done.load(Ordering::Acquire) + finished >= tasks);
    shared.epoch.fetch_add(1, Ordering::SeqCst);
    let helper_panicked = shared.panicked.swap(false, Ordering::AcqRel);
    if let Some(payload) = panic {
        resume_unwind(payload);
    }
    if helper_panicked {
        panic!("a CPU kernel's task panicked on a worker thread");
    }
}

/// Threads the current run's parallel kernels spread over (1 outside a team's run).
pub(crate) fn threads() -> usize {
    let team = CURRENT.with(Cell::get);
    if team.is_null() || IN_TASK.with(Cell::get) {
        return 1;
    }
    // SAFETY: as in `for_each`.
    unsafe { (*team).helpers + 1 }
}

/// `out` cut into chunks of `size` (the last one shorter), handed out by index.
pub(crate) struct Chunks<'a, T> {
    ptr: *mut T,
    len: usize,
    size: usize,
    marker: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: `Chunks` hands each index's chunk to one task only (see `take`), so sharing it
// between threads shares disjoint parts of a `&mut [T]` of `Send` items.
unsafe impl<T: Send> Sync for Chunks<'_, T> {}

impl<'a, T: Send> Chunks<'a, T> {
    pub(crate) fn new(out: &'a mut [T], size: usize) -> Chunks<'a, T> {
        Chunks {
            ptr: out.as_mut_ptr(),
            len: out.len(),
            size: size.max(1),
            marker: std::marker::PhantomData,
        }
    }

    /// How many chunks there are.
    pub(crate) fn count(&self) -> usize {
        self.len.div_ceil(self.size)
    }

    /// Chunk `i`.
    ///
    /// # Safety
    /// Each index may be taken once while the chunks live (as [`for_each`] calls each task
    /// index once), and `i < count()`.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn take(&self, i: usize) -> &'a mut [T] {
        let start = i * self.size;
        let len = self.size.min(self.len - start);
        // SAFETY: `start..start + len` lies inside the slice (`i < count()`), and no other
        // reference to it exists (each index taken once).
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// Calls `f(i, chunk)` for the chunks of `size` of `out`, spread as [`for_each`] spreads.
pub(crate) fn chunks_mut<T: Send>(out: &mut [T], size: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let chunks = Chunks::new(out, size);
    // SAFETY: `for_each` calls each index below `count()` once.
    for_each(chunks.count(), |i| f(i, unsafe { chunks.take(i) }));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every task runs once, on several threads when a team is held, and nested splitting
    /// runs serially; a panic in a task reaches the caller and the team stays usable.
    #[test]
    fn tasks_run_once_each_and_panics_reach_the_caller() {
        let team = Team::of(3).unwrap();
        for tasks in [0usize, 1, 2, 7, 1000] {
            let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            let seen = Mutex::new(std::collections::HashSet::new());
            team.run(|| {
                assert_eq!(threads(), 3);
                for_each(tasks, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                    seen.lock().unwrap().insert(std::thread::current().id());
                    for_each(3, |_| assert_eq!(threads(), 1));
                    std::thread::sleep(Duration::from_micros(20));
                });
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            if tasks >= 7 {
                assert!(
                    seen.lock().unwrap().len() > 1,
                    "{tasks} tasks on one thread"
                );
            }
        }
        let caught = catch_unwind(AssertUnwindSafe(|| {
            team.run(|| for_each(64, |i| assert!(i != 40, "task 40 fails")))
        }));
        assert!(caught.is_err());
        let mut out = vec![0usize; 100];
        team.run(|| chunks_mut(&mut out, 7, |i, chunk| chunk.fill(i)));
        assert!(out.iter().enumerate().all(|(j, v)| *v == j / 7));
        // Outside a run: in order, on this thread.
        let order = Mutex::new(Vec::new());
        for_each(5, |i| order.lock().unwrap().push(i));
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    }

    /// A helper that never comes (set aside by the scheduler) holds up no job: the caller
    /// runs every task itself; once the helper is back, it takes tasks again.
    #[test]
    fn a_missing_helper_holds_up_nothing() {
        let team = Team::start(1).unwrap();
        team.shared.held.store(true, Ordering::Release);
        let caller = std::thread::current().id();
        let ran = AtomicUsize::new(0);
        team.run(|| {
            for _ in 0..500 {
                for_each(4, |_| {
                    assert_eq!(std::thread::current().id(), caller);
                    ran.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(ran.load(Ordering::Relaxed), 2000);
        // A task panicking on the caller, with no helper to take the tasks after it.
        let caught = catch_unwind(AssertUnwindSafe(|| {
            team.run(|| for_each(16, |i| assert!(i != 3, "task 3 fails")))
        }));
        assert!(caught.is_err());
        team.shared.held.store(false, Ordering::Release);
        let seen = Mutex::new(std::collections::HashSet::new());
        team.run(|| {
            for _ in 0..50 {
                for_each(8, |_| {
                    seen.lock().unwrap().insert(std::thread::current().id());
                    std::thread::sleep(Duration::from_micros(200));
                });
            }
        });
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    /// Many short jobs back to back, helpers arriving early, late or not at all: every
    /// task of every job runs exactly once and before its job returns.
    #[test]
    fn short_jobs_back_to_back_run_every_task_once() {
        let team = Team::start(3).unwrap();
        let hits: Vec<AtomicUsize> = (0..7).map(|_| AtomicUsize::new(0)).collect();
        team.run(|| {
            for job in 0..20_000 {
                let tasks = 1 + job % 7;
                for_each(tasks, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                for (i, hit) in hits.iter().enumerate() {
                    assert_eq!(hit.swap(0, Ordering::Relaxed), usize::from(i < tasks));
                }
            }
        });
    }
}
