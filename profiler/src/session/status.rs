//! The live status line while recording.
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// `recording 3.2s · 6400 samples · 0 lost · 2 processes`, redrawn in place. The caller writes
/// the part after the time, and decides whether it is shown (on a terminal, unless `-q`).
pub(super) struct StatusLine {
    bar: Option<ProgressBar>,
    updated: Instant,
}

/// How often the status line is refreshed.
const STATUS_INTERVAL: Duration = Duration::from_millis(250);

impl StatusLine {
    pub(super) fn new(visible: bool) -> Self {
        let bar = visible.then(|| {
            let bar = ProgressBar::new_spinner();
            let style = ProgressStyle::with_template("{spinner} recording {elapsed} · {msg}")
                .expect("valid template");
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        Self { bar, updated: Instant::now() - STATUS_INTERVAL }
    }

    /// Whether a refresh is due (so that callers only gather figures when they are shown).
    pub(super) fn due(&self) -> bool {
        self.due_at(Instant::now())
    }

    fn due_at(&self, now: Instant) -> bool {
        self.bar.is_some() && now.duration_since(self.updated) >= STATUS_INTERVAL
    }

    pub(super) fn update(&mut self, message: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(message);
            self.updated = Instant::now();
        }
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_status_line_is_never_due() {
        let mut status = StatusLine::new(false);
        assert!(!status.due());
        status.update("ignored".into());
        assert!(!status.due());
    }

    #[test]
    fn visible_status_line_refreshes_at_its_interval() {
        let mut status = StatusLine::new(true);
        assert!(status.due(), "the first refresh is due at once");
        status.update("1 sample".into());
        let updated = status.updated;
        assert!(
            !status.due_at(updated + STATUS_INTERVAL - Duration::from_millis(1)),
            "then not before the interval"
        );
        assert!(status.due_at(updated + STATUS_INTERVAL));
        status.finish();
    }
}
