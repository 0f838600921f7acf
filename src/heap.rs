//! Live heap bytes, counted by a global allocator the binary installs ([`Counting`]): what the
//! program holds at a moment and at its peak, apart from how the allocator lays it out in pages.
//! Peak resident memory (what the kernel sees) adds the allocator's holes and kept free pages; the
//! two together tell a leak or an oversized buffer (live peak too high) from fragmentation (resident
//! peak high, live peak not). Where the allocator is not installed (tests, other binaries) every
//! reading is `None`.
//!
//! Also what the allocator can still give: [`available_bytes`] (the machine's or the cgroup's
//! memory left) and [`try_vec`] (a large buffer that fails as an error instead of aborting).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

use crate::error::{Error, Result};

/// The system allocator, counting live bytes, their peak, and a second peak that callers reset
/// at will ([`take_window_peak`]) to see where inside a run the peak falls.
pub struct Counting;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static WINDOW_PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
    WINDOW_PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call forwards to `System` with the caller's layout; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Relaxed);
            }
        }
        p
    }
}

impl Counting {
    /// Marks the allocator as installed; the binary calls it first thing in `main`, so readings
    /// are `Some` only where every allocation went through it.
    pub fn activate(&self) {
        INSTALLED.store(true, Relaxed);
    }
}

fn installed() -> bool {
    INSTALLED.load(Relaxed)
}

/// Bytes allocated and not yet freed.
pub fn live_bytes() -> Option<usize> {
    installed().then(|| LIVE.load(Relaxed))
}

/// The most bytes live at once since the last [`reset_peak`].
pub fn peak_bytes() -> Option<usize> {
    installed().then(|| PEAK.load(Relaxed))
}

/// Starts a new peak at the bytes live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Relaxed), Relaxed);
}

/// The most bytes live at once since the last call, and starts a new window.
pub fn take_window_peak() -> Option<usize> {
    installed().then(|| WINDOW_PEAK.swap(LIVE.load(Relaxed), Relaxed))
}

/// Hands the allocator's free pages back to the kernel (glibc `malloc_trim(0)`: the top of every
/// heap, and whole free pages inside them), so resident memory counts live allocations and not
/// holes left by freed ones. False where the allocator has no such call.
pub fn release_free_pages() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only returns free pages of glibc's heaps to the kernel.
        unsafe { libc::malloc_trim(0) };
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Bytes this process may still allocate: the smaller of the system's `MemAvailable` and what its
/// cgroup's limit leaves (v2 `memory.max`, or v1 `memory.limit_in_bytes`); `None` when neither
/// can be read.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    [meminfo, cgroup_left()].into_iter().flatten().min()
}

/// What this process's cgroup limit leaves, if it has one.
fn cgroup_left() -> Option<u64> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let num = |p: &str| read(p).and_then(|s| s.parse::<u64>().ok());
    // cgroup v2: the process's own group (`0::/path`), else the root of the mount.
    let group = read("/proc/self/cgroup").and_then(|c| {
        c.lines()
            .find_map(|l| l.strip_prefix("0::"))
            .map(str::to_string)
    });
    for dir in group
        .iter()
        .map(|g| format!("/sys/fs/cgroup{g}"))
        .chain(["/sys/fs/cgroup".to_string()])
    {
        if let Some(max) = num(&format!("{dir}/memory.max")) {
            let used = num(&format!("{dir}/memory.current")).unwrap_or(0);
            return Some(max.saturating_sub(used));
        }
    }
    // cgroup v1 (an unlimited group reports a huge number, which `min` then ignores).
    let limit = num("/sys/fs/cgroup/memory/memory.limit_in_bytes")?;
    let used = num("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0);
    Some(limit.saturating_sub(used))
}

/// A vector of `len` copies of `value`, or [`Error::InsufficientMemory`] naming `what` when the
/// allocator cannot provide it. Why: Rust aborts the process when an ordinary allocation fails, and
/// on a rank of `tessera serve` that ends the backend; the large buffers of a job (a wave field's
/// history, a batch of training crops, a decoded image) are taken through here instead, so a rank
/// that runs short despite the estimate of [`crate::memory`] fails its job and the group recovers.
/// (An allocation the kernel grants and later cannot back, under overcommit, is not caught here: the
/// estimate is the first line of defence.)
pub fn try_vec<T: Clone>(len: usize, value: T, what: &str) -> Result<Vec<T>> {
    let needed = (len as u64).saturating_mul(std::mem::size_of::<T>() as u64);
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::InsufficientMemory {
            needed_bytes: needed,
            available_bytes: available_bytes().unwrap_or(0),
            detail: format!("allocating {what} failed"),
        })?;
    v.resize(len, value);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not installed in the test binary: no reading pretends to be one.
    #[test]
    fn readings_are_none_where_the_allocator_is_not_installed() {
        assert_eq!(live_bytes(), None);
        assert_eq!(peak_bytes(), None);
        assert_eq!(take_window_peak(), None);
    }

    /// Used directly, the counters follow allocations, reallocations and frees, and the peak
    /// stays at the most held at once.
    #[test]
    fn counts_follow_allocations_and_the_peak_stays() {
        let before = LIVE.load(Relaxed);
        reset_peak();
        let a = Layout::from_size_align(1000, 8).unwrap();
        unsafe {
            let p = Counting.alloc(a);
            assert!(LIVE.load(Relaxed) >= before + 1000);
            let q = Counting.realloc(p, a, 3000);
            let big = Layout::from_size_align(3000, 8).unwrap();
            assert!(PEAK.load(Relaxed) >= before + 3000);
            let r = Counting.realloc(q, big, 500);
            Counting.dealloc(r, Layout::from_size_align(500, 8).unwrap());
        }
        assert!(PEAK.load(Relaxed) >= before + 3000);
        assert_eq!(LIVE.load(Relaxed), before);
    }

    #[test]
    fn an_impossible_buffer_is_an_error_naming_it_not_an_abort() {
        let err = try_vec(usize::MAX / 4, 0f32, "a wave field's history").unwrap_err();
        assert!(
            matches!(&err, Error::InsufficientMemory { detail, .. } if detail.contains("history")),
            "{err}"
        );
        // Beyond the address space, but not overflowing the byte count.
        let err = try_vec(1usize << 60, 0u8, "a batch").unwrap_err();
        assert!(err.to_string().contains("not enough memory"), "{err}");
        assert_eq!(try_vec(3, 1.5f64, "x").unwrap(), vec![1.5; 3]);
    }
}
