//! The iterations of the current run the reconstruction pane has shown, kept so the user can step
//! back through them (napari's time slider): the float previews, in a byte budget.
//!
//! Place in the flow: the [`super::viewer::Viewer`] pushes each mapped reconstruction preview of
//! the running job here and asks for the frame to show when the user scrubs; a new run clears it.
//! When the frames outgrow the budget, every other frame goes, so a long run keeps its whole
//! course at a coarser step instead of losing its beginning.

use std::sync::Arc;

use crate::protocol::PreviewImage;

/// What the timeline may hold by default: 256 MiB, 64 previews of 1024² (the largest texture the
/// view keeps) in `f32`, or 21 of them in colour.
pub const DEFAULT_BUDGET_BYTES: usize = 256 * 1024 * 1024;

/// One kept preview: the iteration it shows and its float image.
#[derive(Clone)]
pub struct Frame {
    pub iteration: usize,
    pub raw: Arc<PreviewImage>,
    /// Its place among the previews pushed this run (0, 1, 2, …), which decides what thinning keeps.
    seq: usize,
}

impl Frame {
    fn bytes(&self) -> usize {
        self.raw.pixels.len() * std::mem::size_of::<f32>()
    }
}

/// The kept previews, oldest first, and the one the user scrubbed back to (if any).
///
/// Kept are the previews whose place in the run is a multiple of `stride`, and the newest: when
/// they outgrow the budget the stride doubles, which halves them and leaves them evenly spaced.
pub struct Timeline {
    frames: Vec<Frame>,
    bytes: usize,
    budget_bytes: usize,
    stride: usize,
    pushed: usize,
    /// The iteration the user scrubbed back to; `None` follows the newest preview.
    pinned: Option<usize>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::with_budget(DEFAULT_BUDGET_BYTES)
    }
}

impl Timeline {
    pub fn with_budget(budget_bytes: usize) -> Timeline {
        Timeline {
            frames: Vec::new(),
            bytes: 0,
            budget_bytes,
            stride: 1,
            pushed: 0,
            pinned: None,
        }
    }

    /// Forgets every frame (a new run starts).
    pub fn clear(&mut self) {
        *self = Timeline::with_budget(self.budget_bytes);
    }

    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// Bytes of float pixels held, and the budget.
    pub fn bytes(&self) -> (usize, usize) {
        (self.bytes, self.budget_bytes)
    }

    /// Keeps a new preview. A second preview of an iteration already kept replaces it. The pinned
    /// frame (if any) stays where it is: the live position does not follow while scrubbed back.
    pub fn push(&mut self, iteration: usize, raw: Arc<PreviewImage>) {
        if let Some(f) = self.frames.iter_mut().find(|f| f.iteration == iteration) {
            let old = f.bytes();
            f.raw = raw;
            self.bytes = self.bytes - old + f.bytes();
        } else {
            // The newest frame was kept only for being the newest.
            if let Some(last) = self.frames.last()
                && last.seq % self.stride != 0
                && Some(last.iteration) != self.pinned
            {
                self.bytes -= last.bytes();
                self.frames.pop();
            }
            let frame = Frame {
                iteration,
                raw,
                seq: self.pushed,
            };
            self.pushed += 1;
            self.bytes += frame.bytes();
            self.frames.push(frame);
        }
        self.thin();
    }

    /// Doubles the stride until the frames fit the budget. The newest frame (and the pinned one)
    /// always stays, so a single preview larger than the budget is still kept.
    fn thin(&mut self) {
        while self.bytes > self.budget_bytes && self.frames.len() > 1 {
            if self.stride > self.pushed {
                // Only the first, the pinned and the newest are left: the oldest of them goes.
                match self
                    .frames
                    .iter()
                    .take(self.frames.len() - 1)
                    .position(|f| Some(f.iteration) != self.pinned)
                {
                    Some(i) => self.bytes -= self.frames.remove(i).bytes(),
                    None => break,
                }
                continue;
            }
            self.stride *= 2;
            let (stride, pinned, last) = (self.stride, self.pinned, self.frames.len() - 1);
            let mut index = 0;
            let mut freed = 0;
            self.frames.retain(|f| {
                let keep = f.seq % stride == 0 || index == last || Some(f.iteration) == pinned;
                index += 1;
                if !keep {
                    freed += f.bytes();
                }
                keep
            });
            self.bytes -= freed;
        }
    }

    /// The position of the frame on screen: the pinned one, else the newest.
    pub fn position(&self) -> Option<usize> {
        match self.pinned {
            Some(it) => self.frames.iter().position(|f| f.iteration == it),
            None => self.frames.len().checked_sub(1),
        }
    }

    /// The frame the user scrubbed back to; `None` while following the newest preview.
    pub fn pinned(&self) -> Option<&Frame> {
        let it = self.pinned?;
        self.frames.iter().find(|f| f.iteration == it)
    }

    /// Shows the frame at `index` (clamped); the newest one means following new previews again.
    /// Returns the frame to show.
    pub fn scrub_to(&mut self, index: usize) -> Option<&Frame> {
        let last = self.frames.len().checked_sub(1)?;
        let index = index.min(last);
        self.pinned = (index < last).then(|| self.frames[index].iteration);
        self.frames.get(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(pixels: usize) -> Arc<PreviewImage> {
        Arc::new(PreviewImage {
            width: pixels as u32,
            height: 1,
            channels: 1,
            slice: None,
            pixels: vec![0.0; pixels],
        })
    }

    fn iterations(t: &Timeline) -> Vec<usize> {
        t.frames().iter().map(|f| f.iteration).collect()
    }

    #[test]
    fn frames_beyond_the_budget_are_thinned_evenly() {
        // 10 frames of 4 bytes fit in 40 bytes; the 11th halves them.
        let mut t = Timeline::with_budget(40);
        for it in 1..=10 {
            t.push(it, image(1));
        }
        assert_eq!(iterations(&t), (1..=10).collect::<Vec<_>>());
        t.push(11, image(1));
        assert_eq!(iterations(&t), vec![1, 3, 5, 7, 9, 11]);
        assert!(t.bytes().0 <= 40);
        for it in 12..=100 {
            t.push(it, image(1));
            assert!(t.bytes().0 <= 40, "over budget at {it}");
        }
        let kept = iterations(&t);
        assert_eq!(kept.first(), Some(&1), "the run's start stays");
        assert_eq!(kept.last(), Some(&100), "the newest stays");
        // The whole run is still covered evenly: no gap wider than twice the mean gap.
        let gaps: Vec<usize> = kept.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = 99.0 / gaps.len() as f64;
        assert!(kept.len() >= 5, "{kept:?}");
        assert!(
            gaps.iter().all(|&g| g as f64 <= 2.0 * mean + 1.0),
            "{kept:?}"
        );
    }

    #[test]
    fn a_scrubbed_back_frame_stays_on_screen_while_previews_arrive() {
        let mut t = Timeline::with_budget(16);
        for it in 1..=4 {
            t.push(it, image(1));
        }
        assert_eq!(t.scrub_to(1).map(|f| f.iteration), Some(2));
        for it in 5..=40 {
            t.push(it, image(1));
            assert_eq!(t.pinned().map(|f| f.iteration), Some(2), "at {it}");
        }
        assert_eq!(t.position(), Some(1));
        // Scrubbing to the newest follows the live previews again.
        let last = t.frames().len() - 1;
        t.scrub_to(last);
        assert!(t.pinned().is_none());
        t.push(41, image(1));
        assert_eq!(t.position(), Some(t.frames().len() - 1));
    }

    #[test]
    fn one_preview_larger_than_the_budget_is_kept_alone() {
        let mut t = Timeline::with_budget(8);
        t.push(1, image(1));
        t.push(2, image(100));
        assert_eq!(iterations(&t), vec![2]);
    }

    #[test]
    fn a_repeated_iteration_replaces_its_frame() {
        let mut t = Timeline::with_budget(1000);
        t.push(1, image(2));
        t.push(1, image(3));
        assert_eq!(iterations(&t), vec![1]);
        assert_eq!(t.bytes().0, 12);
    }
}
