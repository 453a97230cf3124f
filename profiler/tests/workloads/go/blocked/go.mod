module blocked

go 1.19
