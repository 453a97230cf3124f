<?php
// Off the CPU for SECONDS (the first argument): the main loop sleeps in nap, which calls usleep
// (a C function) for 10 ms at a time. Prints `main PID` first.
function nap(): void
{
    usleep(10000);
}

echo 'main ', getmypid(), "\n";
flush();
$finish = hrtime(true) + (int) ((float) $argv[1] * 1e9);
while (hrtime(true) < $finish) {
    nap();
}
