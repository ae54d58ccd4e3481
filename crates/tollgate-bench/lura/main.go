// The Lura peer of `tollgate bench aggregate`: a gateway built on KrakenD's own framework
// (Lura, github.com/luraproject/lura) the way KrakenD CE builds its router — Lura's gin
// engine (release mode; the access log off through the config's extra_config) over Lura's
// default proxy stack — reading a Lura configuration file the bench writes. Built by the
// bench with `go build` (Go modules), run with GOMAXPROCS set to its core count.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/luraproject/lura/v2/config"
	"github.com/luraproject/lura/v2/logging"
	"github.com/luraproject/lura/v2/proxy"
	krakendgin "github.com/luraproject/lura/v2/router/gin"
	"github.com/luraproject/lura/v2/transport/http/server"
)

func main() {
	configFile := flag.String("c", "lura.json", "Lura configuration file")
	flag.Parse()
	cfg, err := config.NewParser().Parse(*configFile)
	if err != nil {
		log.Fatal("ERROR: ", err.Error())
	}
	// Errors only, as tollgate runs in the bench (log level warn, no access log).
	logger, err := logging.NewLogger("ERROR", os.Stderr, "[LURA]")
	if err != nil {
		log.Fatal("ERROR: ", err.Error())
	}
	engine := krakendgin.NewEngine(cfg, krakendgin.EngineOptions{Logger: logger, Writer: os.Stderr})
	krakendgin.NewFactory(krakendgin.Config{
		Engine:         engine,
		Middlewares:    nil,
		HandlerFactory: krakendgin.EndpointHandler,
		ProxyFactory:   proxy.DefaultFactory(logger),
		Logger:         logger,
		RunServer:      server.RunServer,
	}).New().Run(cfg)
}
