// Rust threads that wait in known ways, each in its own call chain: one sleeps in 10 ms steps,
// one receives from a channel that a third fills every 20 ms. At exit it prints a line per
// waiting thread: NAME TID BLOCKED_NS.
//
// usage: off_cpu_rs [SECONDS]   (default 3)
use std::{
    hint::black_box,
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

#[inline(never)]
fn sleep_inner(blocked: &mut Duration) {
    let started = Instant::now();
    thread::sleep(Duration::from_millis(10));
    *blocked += started.elapsed();
}

#[inline(never)]
fn sleep_middle(blocked: &mut Duration) {
    sleep_inner(black_box(blocked));
    black_box(());
}

#[inline(never)]
fn sleep_outer(blocked: &mut Duration) {
    sleep_middle(black_box(blocked));
    black_box(());
}

#[inline(never)]
fn receive_inner(rx: &mpsc::Receiver<u8>, blocked: &mut Duration) -> bool {
    let started = Instant::now();
    let got = rx.recv().is_ok();
    *blocked += started.elapsed();
    got
}

#[inline(never)]
fn receive_middle(rx: &mpsc::Receiver<u8>, blocked: &mut Duration) -> bool {
    black_box(receive_inner(black_box(rx), blocked))
}

#[inline(never)]
fn receive_outer(rx: &mpsc::Receiver<u8>, blocked: &mut Duration) -> bool {
    black_box(receive_middle(black_box(rx), blocked))
}

/// This thread's id, as the kernel numbers threads.
fn tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").expect("read /proc/thread-self");
    link.file_name().and_then(|name| name.to_str()).and_then(|name| name.parse().ok()).expect("a thread id")
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    let sleeper = thread::Builder::new()
        .name("sleeper".into())
        .spawn(move || {
            let mut blocked = Duration::ZERO;
            while Instant::now() < stop {
                sleep_outer(&mut blocked);
            }
            (tid(), blocked)
        })
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let receiver = thread::Builder::new()
        .name("receiver".into())
        .spawn(move || {
            let mut blocked = Duration::ZERO;
            while receive_outer(&rx, &mut blocked) {}
            (tid(), blocked)
        })
        .unwrap();
    let sender = thread::spawn(move || {
        while Instant::now() < stop {
            thread::sleep(Duration::from_millis(20));
            tx.send(1).unwrap();
        }
    });
    sender.join().unwrap();
    for (name, thread) in [("sleeper", sleeper), ("receiver", receiver)] {
        let (tid, blocked) = thread.join().unwrap();
        println!("{name} {tid} {}", blocked.as_nanos());
    }
}
