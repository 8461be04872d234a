//! The thread pool that split scans (`threads > 1`) run on: one per process, made on first use.
//!
//! Not rayon's global pool: that one is made once per address space, so a process forked after
//! a split scan (a `multiprocessing` fork pool, a pre-forking server's worker) inherited it
//! without its threads, and its first split scan waited for ever for jobs no thread would take.
//! Here each process makes its own pool, told apart by its process id.

use parking_lot::Mutex;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// The pool and the process that made it. Pools are never freed: a parent's, seen in a forked
/// child, has no threads there to stop.
static POOL: Mutex<Option<(u32, &'static ThreadPool)>> = Mutex::new(None);

/// This process's pool, made on first use; `None` if its threads cannot be started, and the
/// caller then scans on its own thread.
pub(super) fn current() -> Option<&'static ThreadPool> {
    let pid = std::process::id();
    if let Some((owner, pool)) = *POOL.lock() {
        if owner == pid {
            return Some(pool);
        }
    }
    // Made outside the lock, which is only ever held for a look: a fork while another thread
    // held it would leave it locked in the child for good.
    let made =
        ThreadPoolBuilder::new().thread_name(|i| format!("toolgate-scan-{i}")).build().ok()?;
    let mut slot = POOL.lock();
    match *slot {
        // Another thread of this process made one meanwhile: ours is dropped, its threads end.
        Some((owner, pool)) if owner == pid => Some(pool),
        _ => {
            let pool: &'static ThreadPool = Box::leak(Box::new(made));
            *slot = Some((pid, pool));
            Some(pool)
        }
    }
}
