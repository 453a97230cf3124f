<?php
// A request of a PHP-FPM pool: handle_request burns about 20 ms of CPU, then the script answers.
function handle_request(): int
{
    $total = 0;
    $finish = hrtime(true) + 20_000_000;
    while (hrtime(true) < $finish) {
        for ($i = 0; $i < 1000; $i++) {
            $total += $i * $i % 7;
        }
    }
    return $total;
}

echo handle_request(), "\n";
