<?php
// recurse calls itself DEPTH times (the second argument, 300 by default: 301 frames of it), then
// spin burns the CPU at the bottom for SECONDS (the first argument). Prints `main PID` first.
function recurse(int $n, int $finish): int
{
    if ($n === 0) {
        return spin($finish);
    }
    return recurse($n - 1, $finish);
}

function spin(int $finish): int
{
    $total = 0;
    while (hrtime(true) < $finish) {
        for ($i = 0; $i < 10000; $i++) {
            $total += $i * $i % 7;
        }
    }
    return $total;
}

echo 'main ', getmypid(), "\n";
flush();
recurse(isset($argv[2]) ? (int) $argv[2] : 300, hrtime(true) + (int) ((float) $argv[1] * 1e9));
