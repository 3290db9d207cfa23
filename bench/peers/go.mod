module github.com/cpuwork/cpuwork/bench/peers

go 1.26.0

replace github.com/cpuwork/cpuwork => ../..

require (
	github.com/alitto/pond/v2 v2.7.1
	github.com/cpuwork/cpuwork v0.0.0
	github.com/panjf2000/ants/v2 v2.12.1
	github.com/sourcegraph/conc v0.3.0
	golang.org/x/sync v0.24.0
)

require (
	github.com/DataDog/zstd v1.5.7 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	go.uber.org/atomic v1.7.0 // indirect
	go.uber.org/multierr v1.9.0 // indirect
	golang.org/x/image v0.45.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
