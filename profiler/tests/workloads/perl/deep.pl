# Deep::recurse calls itself DEPTH times (the second argument, 300 by default: 301 frames of it),
# then Deep::spin burns the CPU at the bottom for SECONDS (the first argument). Prints `main PID`
# first.
use strict;
use warnings;
# Perl warns of a recursion past 100 calls deep, which is the point here.
no warnings 'recursion';

package Deep;

use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

sub recurse {
    my ($n, $seconds) = @_;
    return spin($seconds) if $n == 0;
    return recurse($n - 1, $seconds);
}

sub spin {
    my ($seconds) = @_;
    my $finish = clock_gettime(CLOCK_MONOTONIC) + $seconds;
    my $total = 0;
    while (clock_gettime(CLOCK_MONOTONIC) < $finish) {
        for my $i (0 .. 9999) {
            $total += $i * $i % 7;
        }
    }
    return $total;
}

package main;

$| = 1;
print "main $$\n";
Deep::recurse($ARGV[1] // 300, $ARGV[0]);
