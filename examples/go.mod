module github.com/cpuwork/cpuwork/examples

go 1.26.0

// Examples of cpuwork in a service, a module of its own (they use the
// Prometheus collector); go.work at the repository root uses it.
replace (
	github.com/cpuwork/cpuwork => ..
	github.com/cpuwork/cpuwork/prom => ../prom
)

require (
	github.com/cpuwork/cpuwork v0.0.0
	github.com/cpuwork/cpuwork/prom v0.0.0
	github.com/prometheus/client_golang v1.25.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
