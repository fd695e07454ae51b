// A no-op validating admission webhook: the floor the benchmarks compare Tether's webhook
// with (testing/gonoop.py builds and caches it). POST /validate reads the AdmissionReview,
// answers allowed with the request's uid; GET /readyz answers 200. HTTPS with keep-alive,
// the serving certificate and address from the webhook's own variables:
// TETHER_WEBHOOK_BIND, TETHER_WEBHOOK_CERT_FILE, TETHER_WEBHOOK_KEY_FILE.
package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const maxBody = 3 << 20

type review struct {
	Request struct {
		UID string `json:"uid"`
	} `json:"request"`
}

type answer struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Response   map[string]any `json:"response"`
}

func validate(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, `{"error":"method not allowed"}`, http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var in review
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil {
		http.Error(w, `{"error":"invalid AdmissionReview"}`, http.StatusBadRequest)
		return
	}
	out, _ := json.Marshal(answer{
		"admission.k8s.io/v1", "AdmissionReview",
		map[string]any{"uid": in.Request.UID, "allowed": true},
	})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", validate)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ready"}`))
	})
	srv := &http.Server{
		Addr:              os.Getenv("TETHER_WEBHOOK_BIND"),
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		_ = srv.Close()
	}()
	err := srv.ListenAndServeTLS(os.Getenv("TETHER_WEBHOOK_CERT_FILE"), os.Getenv("TETHER_WEBHOOK_KEY_FILE"))
	if err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
