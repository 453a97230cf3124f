# Outer::Worker::alpha, ::beta and ::gamma burn 60%, 30% and 10% of the script's CPU time: each
# round of Outer::Worker::run calls them with 6, 3 and 1 times the same loop, until SECONDS (the
# first argument) have passed. Their chains, as `caller` gives them (neither block is a frame):
#   <main> -> Outer::Worker::run -> (map block) Outer::Worker::step -> Outer::Worker::alpha
#   <main> -> Outer::Worker::run -> (map block) Outer::Worker::step -> (sort block) Outer::Worker::beta
#   <main> -> Outer::Worker::run -> (map block) Outer::Worker::step -> Outer::Worker::gamma
# The map block runs in its caller's loop of ops; the sort block in one of its own, under the C
# function that sorts (Perl_sortsv_flags). How much work varies from round to round (about
# 2.5 ms), so that no sampling period can fall in step with the rounds. Prints `main PID` first.
use strict;
use warnings;

package Outer::Worker;

use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

use constant UNIT => 5000;

sub run {
    my ($seconds) = @_;
    my $finish = clock_gettime(CLOCK_MONOTONIC) + $seconds;
    while (clock_gettime(CLOCK_MONOTONIC) < $finish) {
        my $unit = int(UNIT / 2 + rand(UNIT));
        my @steps = map { step($unit) } 1;
    }
}

sub step {
    my ($unit) = @_;
    alpha(6 * $unit);
    # Two items, one comparison. beta's call is the block's last op, as a comparator's often is:
    # returning from it ends the sort's loop of ops.
    my @pair = sort { beta(3 * $unit) } 1, 2;
    return gamma($unit);
}

sub alpha {
    my ($n) = @_;
    my $total = 0;
    for my $i (0 .. $n - 1) {
        $total += $i * $i % 7;
    }
    return $total;
}

sub beta {
    my ($n) = @_;
    my $total = 0;
    for my $i (0 .. $n - 1) {
        $total += $i * $i % 7;
    }
    return $total;
}

sub gamma {
    my ($n) = @_;
    my $total = 0;
    for my $i (0 .. $n - 1) {
        $total += $i * $i % 7;
    }
    return $total;
}

package main;

$| = 1;
print "main $$\n";
Outer::Worker::run($ARGV[0]);
