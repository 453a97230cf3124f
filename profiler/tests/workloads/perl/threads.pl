# Three ithreads run for SECONDS (the first argument) where C code runs Perl and Perl's op loop
# runs in loops of its own: each calls its sub through a block, which calls Outer::Worker::burn:
#   sorter:  Outer::Worker::sorter -> (sort block, C) cmp_burn -> burn
#   finder:  Outer::Worker::finder -> (List::Util::first, C) Outer::Worker::__ANON__ -> find_burn -> burn
#   catcher: Outer::Worker::catcher -> (sort block, C; an eval {} in it runs the rest of the
#            block in a loop of ops of its own that nothing marks) catch_burn -> burn
# Each thread starts in the `(eval)` of threads->create's call. The main thread prints
# `main PID` first; each thread prints `NAME TID` as it starts; the main thread joins them.
use strict;
use warnings;
use threads;

package Outer::Worker;

use List::Util ();
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

# Linux's gettid on x86-64.
use constant SYS_GETTID => 186;

sub burn {
    my $total = 0;
    for my $i (0 .. 1999) {
        $total += $i * $i % 7;
    }
    return $total;
}

sub cmp_burn { burn(); return $_[0] <=> $_[1] }

sub find_burn { burn(); return 0 }

sub catch_burn { burn(); return 0 }

sub announce { syswrite(STDOUT, "$_[0] " . syscall(SYS_GETTID) . "\n") }

sub sorter {
    my ($finish) = @_;
    announce("sorter");
    while (clock_gettime(CLOCK_MONOTONIC) < $finish) {
        my @sorted = sort { cmp_burn($a, $b) } 1 .. 3;
    }
}

sub finder {
    my ($finish) = @_;
    announce("finder");
    while (clock_gettime(CLOCK_MONOTONIC) < $finish) {
        my $found = List::Util::first { find_burn($_) } 1 .. 3;
    }
}

sub catcher {
    my ($finish) = @_;
    announce("catcher");
    while (clock_gettime(CLOCK_MONOTONIC) < $finish) {
        my @sorted = sort { eval { 1 }; catch_burn(); $a <=> $b } 1 .. 3;
    }
}

package main;

$| = 1;
print "main $$\n";
my $finish = Time::HiRes::clock_gettime(Time::HiRes::CLOCK_MONOTONIC()) + $ARGV[0];
my @threads = map { threads->create(\&{"Outer::Worker::$_"}, $finish) } qw(sorter finder catcher);
$_->join for @threads;
