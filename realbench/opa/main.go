// Command opa serves Open Policy Agent's REST server as it ships
// (github.com/open-policy-agent/opa v1.22.3, package v1/server, from the Go
// module proxy) over an in-memory store, stock or behind one of the
// admitters a Go team would put in front of it, for `cpuwork bench
// --scenario realserver-opa`. It listens on a loopback port, writes
// "listening ADDR" to stdout, and serves until stdin reaches EOF.
//
// The store holds a generated data set (20,000 resources, 500 users, 200
// groups) and the policy below. The bench's load generator asks for
// /small and /large; they become the REST API's own queries:
//
//	/small -> POST /v1/data/bench/small {"input": {"user": ...}}
//	          a user's resources: a comprehension over the 500 most recent (~1-2 ms)
//	/large -> POST /v1/data/bench/large {"input": {"pattern": ...}}
//	          resources whose name matches a glob, joined with their
//	          groups' tags: glob.match and a join over all 20,000 (~0.1-0.5 s)
//
// Variants (-variant): stock, or behind one of the admitters of package
// admit.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cpuwork/cpuwork/realbench/admit"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/server"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

const policy = `package bench

small := count([r.id | some r in data.recent; r.owner == input.user])

large := count({[r.id, t] |
	some r in data.resources
	glob.match(input.pattern, ["-"], r.name)
	some g in data.groups
	g.id == r.group
	some t in g.tags
})
`

func main() {
	f := admit.ParseFlags("opa", false) // -origin: unused (the bench passes it to every server)
	if err := serve(f.Variant, f.SLO, os.Stdout, os.Stdin); err != nil {
		log.Fatal("opa: ", err)
	}
}

// dataset is the store's content: resources with an owner, a group and a
// name, the most recent 500 of them apart, and groups with tags.
func dataset() map[string]any {
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"}
	var resources, recent []any
	for i := range 20000 {
		r := map[string]any{
			"id":    fmt.Sprintf("r%05d", i),
			"owner": fmt.Sprintf("u%03d", i%500),
			"group": fmt.Sprintf("g%03d", i%200),
			"name":  fmt.Sprintf("%s-%s-%d", words[i%len(words)], words[(i/8)%len(words)], i),
		}
		resources = append(resources, r)
		if i >= 19500 {
			recent = append(recent, r)
		}
	}
	var groups []any
	for g := range 200 {
		groups = append(groups, map[string]any{"id": fmt.Sprintf("g%03d", g), "tags": []any{"t" + fmt.Sprint(g%7), "t" + fmt.Sprint(g%11)}})
	}
	return map[string]any{"resources": resources, "recent": recent, "groups": groups}
}

func serve(variant string, slo time.Duration, out io.Writer, stdin io.Reader) error {
	ctx := context.Background()
	store := inmem.NewFromObject(dataset())
	if err := storage.Txn(ctx, store, storage.WriteParams, func(txn storage.Transaction) error {
		return store.UpsertPolicy(ctx, txn, "bench.rego", []byte(policy))
	}); err != nil {
		return err
	}
	m, err := plugins.New([]byte{}, "realbench", store)
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	defer m.Stop(ctx)
	srv, err := server.New().WithStore(store).WithManager(m).WithAddresses([]string{"127.0.0.1:0"}).Init(ctx)
	if err != nil {
		return err
	}
	bodies := map[string]string{
		"/small": `{"input": {"user": "u042"}}`,
		"/large": `{"input": {"pattern": "*-delta-*"}}`,
	}
	var app http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		q, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "/v1/data/bench"+r.URL.Path, strings.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		q.Header.Set("Content-Type", "application/json")
		srv.Handler.ServeHTTP(w, q)
	})
	return admit.Serve(variant, app, slo, out, stdin)
}
