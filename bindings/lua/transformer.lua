return require("transformer.core")
