module shares

go 1.19
