
R

h0traind (:.	
w

scalar
rng
configdB
modelfuzz