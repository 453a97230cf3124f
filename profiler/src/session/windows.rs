//! The windows of a continuous session (`Settings::window`, the agent): at each window's end,
//! the aggregate and the names start afresh (so memory follows one window, not the session),
//! and the window's samples go to the mode as a recording once named, meanwhile records are
//! drained.
use std::{collections::VecDeque, time::Duration};

use anyhow::Result;

use super::{Collector, pipeline::Pipeline, whole::Whole};
use crate::{
    aggregate::Aggregate,
    clock::Start,
    model::{Meta, Recording},
    symbolize::{Finished, Symbols},
};

/// The windows of a continuous session: when the current one opened and when it closes, and
/// those cut, waiting for their names.
pub(super) struct Windows {
    every: Duration,
    opened: Start,
    pub(super) closes_at: tokio::time::Instant,
    /// What every window's recording says of the session.
    base: Meta,
    /// The windows cut, oldest first, while their frames are named.
    unnamed: VecDeque<UnnamedWindow>,
    /// With outputs to write: every window handed over, merged.
    whole: Option<Whole>,
}

/// A window cut, waiting for its names.
struct UnnamedWindow {
    aggregate: Aggregate,
    meta: Meta,
    opened_ns: u64,
    symbols: Finished,
}

/// Windows cut whose names may be awaited at once (naming a host's first window can take longer
/// than a window).
const MAX_UNNAMED_WINDOWS: usize = 4;

/// Windows a module may go unsampled before it is let go (a minute at the agent's default).
const IDLE_WINDOWS: u64 = 4;

impl Windows {
    /// Windows `every` so long, their recordings said of by `base`; with `whole`, merged too.
    pub(super) fn new(every: Duration, base: Meta, whole: Option<Whole>) -> Self {
        Self {
            every,
            opened: Start::now(),
            closes_at: tokio::time::Instant::now() + every,
            base,
            unnamed: VecDeque::new(),
            whole,
        }
    }

    /// Every window handed over, merged, if kept: once the last one is.
    pub(super) fn take_whole(&mut self) -> Option<Whole> {
        self.whole.take()
    }

    /// The names of the oldest window cut, once naming has them; never while none is waiting.
    pub(super) async fn named(&mut self) -> Result<Symbols> {
        match self.unnamed.front_mut() {
            Some(window) => (&mut window.symbols).await,
            None => std::future::pending().await,
        }
    }

    /// The current window closes now: the collector adds what it holds that no record brought
    /// yet, the frames seen so far go to naming, and the window is cut (the oldest handed to
    /// `consumer` if too many wait for their names).
    pub(super) async fn close<C: Collector>(
        &mut self,
        pipeline: &mut Pipeline<C>,
        kernel: &mut C::Kernel,
        consumer: &mut dyn FnMut(Recording),
    ) -> Result<()> {
        let end = Start::now();
        pipeline.collector.close_window(kernel, &mut pipeline.aggregate, end.monotonic_ns)?;
        pipeline.settle();
        self.cut(pipeline, consumer, end).await;
        Ok(())
    }

    /// The last window, partial: cut, and handed to `consumer` with every window still waiting
    /// for its names.
    pub(super) async fn close_last<C: Collector>(
        &mut self,
        pipeline: &mut Pipeline<C>,
        consumer: &mut dyn FnMut(Recording),
    ) {
        self.cut(pipeline, consumer, Start::now()).await;
        while !self.unnamed.is_empty() {
            self.hand_over_window(pipeline, consumer).await;
        }
    }

    /// Closes the current window: the aggregate and the names start afresh (so memory follows
    /// one window, not the session), and its samples go to the consumer as a recording once
    /// named ([`Self::hand_over`]), meanwhile records are drained. Only when naming is
    /// [`MAX_UNNAMED_WINDOWS`] windows behind does the cut wait for the oldest.
    async fn cut<C: Collector>(
        &mut self,
        pipeline: &mut Pipeline<C>,
        consumer: &mut dyn FnMut(Recording),
        end: Start,
    ) {
        if self.unnamed.len() >= MAX_UNNAMED_WINDOWS {
            self.hand_over_window(pipeline, consumer).await;
        }
        let meta = Meta {
            start_unix_ns: self.opened.unix_ns,
            duration_ns: end.monotonic_ns.saturating_sub(self.opened.monotonic_ns),
            unwind: pipeline.walker.stats().summary(),
            ..self.base.clone()
        };
        self.unnamed.push_back(UnnamedWindow {
            aggregate: pipeline.aggregate.take(),
            meta,
            opened_ns: self.opened.monotonic_ns,
            symbols: pipeline.naming.finish(end.monotonic_ns),
        });
        self.opened = end;
        self.closes_at += self.every;
        // What runs for weeks lets go of what it no longer sees: modules idle for a few windows
        // (the recordings of windows cut need only their paths and build ids), and processes
        // whose exit the kernel never reported.
        let idle = pipeline.walker.address_spaces().modules().idle(IDLE_WINDOWS);
        pipeline.evict(&idle);
        let spaces = pipeline.walker.address_spaces_mut();
        spaces.modules_mut().next_period();
        spaces.notice_exits(self.opened.monotonic_ns);
    }

    /// Waits for the names of the oldest window cut, if any, and hands it over.
    async fn hand_over_window<C: Collector>(
        &mut self,
        pipeline: &mut Pipeline<C>,
        consumer: &mut dyn FnMut(Recording),
    ) {
        if let Some(window) = self.unnamed.front_mut() {
            let symbols = (&mut window.symbols).await;
            self.hand_over(pipeline, consumer, symbols);
        }
    }

    /// Hands the oldest window cut to `consumer`, named by `symbols`; without them (naming
    /// failed), its frames keep placeholder names.
    pub(super) fn hand_over<C: Collector>(
        &mut self,
        pipeline: &mut Pipeline<C>,
        consumer: &mut dyn FnMut(Recording),
        symbols: Result<Symbols>,
    ) {
        let Some(UnnamedWindow { aggregate, meta, opened_ns, .. }) = self.unnamed.pop_front() else {
            return;
        };
        let symbols = symbols.unwrap_or_else(|err| {
            eprintln!("profiler: warning: {err:#}");
            Symbols::default()
        });
        let modules = pipeline.walker.address_spaces().modules();
        let recording = aggregate.recording(&symbols, modules, opened_ns, meta);
        if let Some(whole) = &mut self.whole {
            whole.add(&recording, opened_ns);
        }
        consumer(recording);
    }
}
