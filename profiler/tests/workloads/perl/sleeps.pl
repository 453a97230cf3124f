# Off the CPU for SECONDS (the first argument): the main program sleeps in main::nap, which waits
# 10 ms at a time in a four-argument `select` (the C library's select). Prints `main PID` first.
use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

sub nap {
    select(undef, undef, undef, 0.01);
}

$| = 1;
print "main $$\n";
my $finish = clock_gettime(CLOCK_MONOTONIC) + $ARGV[0];
while (clock_gettime(CLOCK_MONOTONIC) < $finish) {
    nap();
}
