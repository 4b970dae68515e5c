module flashbwd/bindings/go

go 1.19
