//! Live heap bytes, counted by a global allocator the binary installs ([`Counting`]): what the
//! program holds at a moment and at its peak, apart from how the allocator lays it out in pages.
//! Peak resident memory (what the kernel sees) adds the allocator's holes and kept free pages; the
//! two together tell a leak or an oversized buffer (live peak too high) from fragmentation (resident
//! peak high, live peak not). Where the allocator is not installed (tests, other binaries) every
//! reading is `None`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};

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
}
