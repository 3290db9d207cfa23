module github.com/cpuwork/cpuwork/cpuworkgrpc

go 1.26.0

// A module of its own so that the library module never depends on
// google.golang.org/grpc; go.work at the repository root uses it.
replace github.com/cpuwork/cpuwork => ..

require (
	github.com/cpuwork/cpuwork v0.0.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
