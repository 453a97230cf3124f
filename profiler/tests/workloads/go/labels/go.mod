module labels

go 1.19
