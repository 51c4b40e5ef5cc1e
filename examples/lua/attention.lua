print("attention weights")
